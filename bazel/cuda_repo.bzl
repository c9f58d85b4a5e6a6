"""Finds the CUDA toolkit: CUDA_PATH if set, else /usr/local/cuda.

The repository exposes headers (include and include/cccl, which cuda_fp16.h needs for
<nv/target>), static cudart, shared cuBLAS/cuBLASLt, and the absolute nvcc path that
bazel/cuda.bzl must call (through external/cuda/bin nvcc cannot find cicc).
"""

def _cuda_repo_impl(ctx):
    path = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    root = ctx.path(path)
    have = root.get_child("bin").get_child("nvcc").exists
    if have:
        for child in ["include", "lib64", "bin"]:
            ctx.symlink(root.get_child(child), child)
    ctx.file("defs.bzl", "\n".join([
        "CUDA_AVAILABLE = %s" % ("True" if have else "False"),
        "NVCC_PATH = \"%s\"" % (str(root.get_child("bin").get_child("nvcc")) if have else ""),
        "",
    ]))
    ctx.template("BUILD", ctx.attr.build_file_template, {})

cuda_repo = repository_rule(
    implementation = _cuda_repo_impl,
    environ = ["CUDA_PATH"],
    attrs = {"build_file_template": attr.label(allow_single_file = True)},
    local = True,
)

"""cuda_library: compiles .cu files with nvcc into a PIC archive that cc_* rules link.

Each .cu becomes one object (nvcc -c, -fPIC through -Xcompiler), the objects are archived with
the C toolchain's ar, and the archive is returned as CcInfo. nvcc is called by its absolute
path (through external/cuda/bin it cannot find cicc), with PATH set (Bazel actions get an
empty one and gcc then cannot find `as`) and -ccbin pointing at the C toolchain's compiler.

Target architectures come from --define=cuda_archs=80,90 (default); each entry emits SASS,
and the highest also emits PTX so newer GPUs can JIT it. A library whose code exists for one
architecture only (sm_90a's wgmma) names it in `archs`, which replaces the define's list.
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")
load("@cuda//:defs.bzl", "NVCC_PATH")

def _gencode_flags(archs):
    flags = []
    for arch in archs:
        flags.append("-gencode=arch=compute_%s,code=sm_%s" % (arch, arch))
    flags.append("-gencode=arch=compute_%s,code=compute_%s" % (archs[-1], archs[-1]))
    return flags

def _cuda_library_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    archs = ctx.attr.archs or [a for a in ctx.var.get("cuda_archs", "80,90").split(",") if a]
    dep_cc = [d[CcInfo] for d in ctx.attr.deps]
    comp_ctx = cc_common.merge_cc_infos(cc_infos = dep_cc).compilation_context

    include_flags = ["-I."]
    for inc in comp_ctx.includes.to_list() + comp_ctx.quote_includes.to_list():
        include_flags.append("-I" + inc)
    for inc in comp_ctx.system_includes.to_list():
        include_flags.append("-isystem")
        include_flags.append(inc)
    define_flags = ["-D" + d for d in comp_ctx.defines.to_list() + ctx.attr.defines]

    inputs = depset(ctx.files.hdrs, transitive = [comp_ctx.headers])
    objects = []
    for src in ctx.files.srcs:
        obj = ctx.actions.declare_file("_objs/%s/%s.o" % (ctx.label.name, src.basename))
        args = ["-c", src.path, "-o", obj.path, "-ccbin", cc_toolchain.compiler_executable,
                "-Xcompiler", "-fPIC", "-O3", "-std=c++17", "-t", "2",
                "--expt-relaxed-constexpr", "-Xcudafe", "--display_error_number",
                # Intermediates beside the object: in /tmp, two sandboxed nvcc actions can
                # pick the same temporary name and break each other.
                "--objdir-as-tempdir"]
        args += _gencode_flags(archs) + include_flags + define_flags + ctx.attr.copts
        ctx.actions.run(
            executable = NVCC_PATH,
            arguments = args,
            inputs = depset([src], transitive = [inputs, cc_toolchain.all_files]),
            outputs = [obj],
            env = {"PATH": "/usr/local/bin:/usr/bin:/bin"},
            mnemonic = "NvccCompile",
            progress_message = "nvcc %s" % src.short_path,
        )
        objects.append(obj)

    archive = ctx.actions.declare_file("lib%s.a" % ctx.label.name)
    ctx.actions.run(
        executable = cc_toolchain.ar_executable,
        arguments = ["rcsD", archive.path] + [o.path for o in objects],
        inputs = depset(objects, transitive = [cc_toolchain.all_files]),
        outputs = [archive],
        mnemonic = "CudaArchive",
    )

    feature_configuration = cc_common.configure_features(ctx = ctx, cc_toolchain = cc_toolchain)
    library = cc_common.create_library_to_link(
        actions = ctx.actions,
        feature_configuration = feature_configuration,
        cc_toolchain = cc_toolchain,
        pic_static_library = archive,
        static_library = archive,
        alwayslink = ctx.attr.alwayslink,
    )
    linker_input = cc_common.create_linker_input(
        owner = ctx.label,
        libraries = depset([library]),
    )
    own = CcInfo(
        compilation_context = cc_common.create_compilation_context(headers = depset(ctx.files.hdrs)),
        linking_context = cc_common.create_linking_context(linker_inputs = depset([linker_input])),
    )
    return [
        DefaultInfo(files = depset([archive])),
        cc_common.merge_cc_infos(direct_cc_infos = [own], cc_infos = dep_cc),
    ]

cuda_library = rule(
    implementation = _cuda_library_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = [".h", ".cuh"]),
        "deps": attr.label_list(providers = [CcInfo]),
        "defines": attr.string_list(),
        "copts": attr.string_list(),
        # Overrides --define=cuda_archs for this library, e.g. ["90a"].
        "archs": attr.string_list(),
        "alwayslink": attr.bool(default = False),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    incompatible_use_toolchain_transition = True,
)

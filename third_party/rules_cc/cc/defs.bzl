"""Forwards @rules_cc's rule names to Bazel's native rules (offline stand-in)."""

cc_library = native.cc_library
cc_binary = native.cc_binary
cc_test = native.cc_test
cc_import = native.cc_import
cc_toolchain = native.cc_toolchain
cc_toolchain_suite = native.cc_toolchain_suite
cc_proto_library = native.cc_proto_library
fdo_prefetch_hints = native.fdo_prefetch_hints
fdo_profile = native.fdo_profile
objc_import = native.objc_import
objc_library = native.objc_library

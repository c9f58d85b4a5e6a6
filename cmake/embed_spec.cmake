# cmake -DIN=spec.yaml -DOUT=file.c -P embed_spec.cmake: the spec as the C string
# cli_bench_capture_spec, `recap bench-capture`'s built-in default (cli/BUILD's genrule does the
# same for Bazel). Each line becomes a string literal with its backslashes and quotes escaped.
file(READ "${IN}" text)
string(REGEX REPLACE "\n$" "" text "${text}")
string(REPLACE "\\" "\\\\" text "${text}")
string(REPLACE "\"" "\\\"" text "${text}")
string(REPLACE "\n" "\\n\"\n  \"" text "${text}")
file(WRITE "${OUT}"
     "/* Generated from specs/transformer_block.yaml by cmake/embed_spec.cmake. */\n"
     "#include \"cli/cli.h\"\n"
     "const char cli_bench_capture_spec[] =\n"
     "  \"${text}\\n\"\n"
     ";\n")

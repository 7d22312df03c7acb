# Writes a C++ source defining `const unsigned char ${SYMBOL}[]` and `const size_t
# ${SYMBOL}Size` with the bytes of ${INPUT}, into ${OUTPUT} (cmake -P; the engine's CMakeLists
# runs it when the input changes).
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" digits)
math(EXPR size "${digits} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x..,){32})" "\\1\n" bytes "${bytes}")
file(WRITE "${OUTPUT}"
     "// Generated from ${INPUT} by embed.cmake: do not edit.\n#include <cstddef>\n"
     "extern const unsigned char ${SYMBOL}[];\nextern const size_t ${SYMBOL}Size;\n"
     "const unsigned char ${SYMBOL}[] = {\n${bytes}};\nconst size_t ${SYMBOL}Size = ${size};\n")

// The sizes of the type names a kiln package uses: manifest.json's tensor
// dtypes and kernel argument types (docs/package-format.md). Pure functions.
#pragma once

#include <string_view>

namespace kiln::rt {

// Bytes of one element of a tensor dtype ("fp32", "bf16", "fp16", "fp64",
// "i32", "i64", "i16", "i8", "u8", "fp8e4nv", "fp8e5", "bool", ...); 0 when
// unknown.
int dtype_size(std::string_view dtype);

// Bytes of one kernel argument of type `ty`: a pointer ("*fp32") 8, a
// scalar its dtype's size, a TMA descriptor ("nvTmaDesc") 128; 0 when unknown.
int arg_size(std::string_view ty);

}  // namespace kiln::rt

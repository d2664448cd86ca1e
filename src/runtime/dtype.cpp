#include "dtype.h"

namespace kiln::rt {

int dtype_size(std::string_view d) {
  if (d == "fp32" || d == "i32" || d == "u32" || d == "f32") return 4;
  if (d == "bf16" || d == "fp16" || d == "i16" || d == "u16" || d == "f16") return 2;
  if (d == "fp64" || d == "i64" || d == "u64") return 8;
  if (d == "i8" || d == "u8" || d == "bool" || d == "i1" || d.substr(0, 3) == "fp8") return 1;
  return 0;
}

int arg_size(std::string_view ty) {
  if (!ty.empty() && ty[0] == '*') return 8;
  if (ty == "nvTmaDesc") return 128;
  return dtype_size(ty);
}

}  // namespace kiln::rt

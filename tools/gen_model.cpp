// gen_model: writes a random-weight model in a real architecture's shape as
// GGUF, for speed tests where no model can be downloaded.
//
//   gen_model --shape llama3-8b --dtype q4_k --out /tmp/llama3-8b-q4_k.gguf
#include <cstdio>
#include <string>

#include "core/error.h"
#include "tools/gen_model_lib.h"

int main(int argc, char** argv) {
  using namespace brioche;
  std::string shape, dtype_text = "bf16", out;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--shape") shape = argv[i + 1];
    else if (flag == "--dtype") dtype_text = argv[i + 1];
    else if (flag == "--out") out = argv[i + 1];
    else {
      std::fprintf(stderr, "gen_model: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (shape.empty() || out.empty()) {
    std::fprintf(stderr, "usage: gen_model --shape NAME --dtype DTYPE --out FILE.gguf\n  shapes:");
    for (const auto& p : tools::shape_presets()) std::fprintf(stderr, " %s", p.name.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  try {
    DType dtype;
    if (!parse_dtype(dtype_text, &dtype)) fail("unknown dtype '", dtype_text, "'");
    model::Checkpoint ck = tools::random_checkpoint(tools::find_shape(shape), dtype);
    tools::write_gguf(ck, out);
    std::printf("wrote %s (%s, %s)\n", out.c_str(), shape.c_str(), dtype_text.c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "gen_model: %s\n", e.what());
    return 1;
  }
  return 0;
}

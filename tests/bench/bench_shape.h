// The model and batch shape the CPU step benchmarks share (bench_zero_stages, bench_muon): one
// definition of its flags, of their check and of the GPT-2 ModelConfig they make.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <utility>

#include "config/model_config.h"

namespace zt {

struct BenchShape {
  int layers = 12, embd = 768, heads = 12, vocab = 50257, block = 64, batch = 4;  // GPT-2 124M
};

/// --layers, --embd, --heads, --vocab, --block, --batch, defaulting to `s`'s values.
inline void add_shape_flags(boost::program_options::options_description& flags, BenchShape& s) {
  namespace po = boost::program_options;
  flags.add_options()("layers", po::value(&s.layers)->default_value(s.layers), "transformer blocks")
    ("embd", po::value(&s.embd)->default_value(s.embd), "hidden size")
    ("heads", po::value(&s.heads)->default_value(s.heads), "attention heads")
    ("vocab", po::value(&s.vocab)->default_value(s.vocab), "vocabulary size")
    ("block", po::value(&s.block)->default_value(s.block), "sequence length")
    ("batch", po::value(&s.batch)->default_value(s.batch), "micro-batch per rank");
}

/// What is wrong with the shape, in one line naming the flag, or "".
inline std::string shape_problem(const BenchShape& s) {
  const std::pair<const char*, int> sizes[] = {{"--layers", s.layers}, {"--embd", s.embd},   {"--heads", s.heads},
                                               {"--vocab", s.vocab},   {"--block", s.block}, {"--batch", s.batch}};
  for (const auto& [flag, value] : sizes) {
    if (value < 1) return std::string(flag) + " " + std::to_string(value) + ": give 1 or more";
  }
  return "";
}

inline ModelConfig shape_model(const BenchShape& s) {
  ModelConfig mc;
  mc.n_layer = s.layers;
  mc.n_embd = s.embd;
  mc.n_head = s.heads;
  mc.vocab_size = s.vocab;
  mc.n_positions = 1024;
  return mc;
}

}  // namespace zt

#include "checkpoint/manifest.h"

#include <zlib.h>

#include <set>

#include "config/json_reader.h"
#include "config/json_section.h"
#include "config/llama_config.h"
#include "core/error.h"
#include "model/model_layout.h"

namespace zt {

namespace {

// The checksum member, exactly as the writer appends it. In text serialize() wrote this byte
// sequence can only be that member: inside a string a quote would be escaped.
constexpr std::string_view kCrcMember = ",\"manifest_crc32\":";

uint32_t crc32_of(std::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths; a manifest is far below 4 GiB (kMaxJsonBytes), but stay exact.
  for (size_t done = 0; done < bytes.size();) {
    const size_t n = std::min<size_t>(bytes.size() - done, size_t(1) << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + done), uInt(n));
    done += n;
  }
  return uint32_t(crc);
}

// Checks manifest_crc32 when the manifest has one; returns whether it has. The member must be
// where the writer puts it, last, followed only by the closing brace (and whitespace): then every
// other byte of the file is covered by the checksum, and nothing after it can carry meaning.
bool check_checksum(std::string_view text, const boost::json::object& m, const std::string& path) {
  if (!m.contains("manifest_crc32")) return false;
  auto refuse = [&](const std::string& what) { throw UsageError(cat(path, ": manifest_crc32: ", what)); };
  const size_t at = text.rfind(kCrcMember);
  if (at == std::string_view::npos) refuse("not written as the writer writes it (,\"manifest_crc32\":N as the last member)");
  std::string_view tail = text.substr(at + kCrcMember.size());
  uint64_t stored = 0;
  size_t digits = 0;
  while (digits < tail.size() && digits < 11 && tail[digits] >= '0' && tail[digits] <= '9') {
    stored = stored * 10 + uint64_t(tail[digits++] - '0');
  }
  tail.remove_prefix(digits);
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r' || tail.back() == ' ' || tail.back() == '\t')) {
    tail.remove_suffix(1);
  }
  if (digits == 0 || digits > 10 || stored > UINT32_MAX || tail != "}") {
    refuse("must be the last member, an integer below 2^32, followed only by the closing brace");
  }
  const uint32_t computed = crc32_of(text.substr(0, at));
  if (computed != stored) {
    refuse(cat("checksum mismatch: the manifest was edited or is corrupt (it says ", stored, ", its content gives ",
               computed, ")"));
  }
  return true;
}

// Required reads: JsonSection's reads leave absent keys alone; a manifest has no optional keys
// but node_local and num_nodes (written since node-local storage).
template <typename T>
T need_int(JsonSection& s, std::string_view key, int64_t min, int64_t max) {
  int64_t value = 0;
  if (!s.read(key, value, min, max)) s.fail(key, "missing");
  return T(value);
}

uint64_t need_uint(JsonSection& s, std::string_view key, uint64_t max = UINT64_MAX) {
  const boost::json::value* v = s.raw(key);
  if (!v || v->is_null()) s.fail(key, "missing");
  uint64_t value = 0;
  if (v->is_uint64()) {
    value = v->get_uint64();
  } else if (v->is_int64() && v->get_int64() >= 0) {
    value = uint64_t(v->get_int64());
  } else {
    s.fail(key, cat("expected an integer >= 0, got ", describe_json(*v)));
  }
  if (value > max) s.fail(key, cat("must be <= ", max, ", got ", value));
  return value;
}

std::string need_string(JsonSection& s, std::string_view key) {
  std::string value;
  if (!s.read(key, value)) s.fail(key, "missing");
  return value;
}

const boost::json::array& need_array(JsonSection& s, std::string_view key) {
  const boost::json::value* v = s.raw(key);
  if (!v || v->is_null()) s.fail(key, "missing");
  if (!v->is_array()) s.fail(key, cat("expected an array, got ", describe_json(*v)));
  return v->get_array();
}

// Each element of an array of objects, as a section named "key[i]".
JsonSection element(const boost::json::array& array, size_t i, std::string_view key, const std::string& path) {
  const std::string name = cat(key, "[", i, "]");
  if (!array[i].is_object()) {
    throw UsageError(cat(path, ": ", name, ": expected an object, got ", describe_json(array[i])));
  }
  return JsonSection(&array[i].get_object(), name, path);
}

ModelConfig read_model(JsonSection& top, const std::string& path, boost::json::object& model_out) {
  const boost::json::value* v = top.raw("model_config");
  if (!v || v->is_null()) top.fail("model_config", "missing");
  if (!v->is_object()) top.fail("model_config", cat("expected an object, got ", describe_json(*v)));
  const boost::json::object& mc = v->get_object();
  model_out = mc;
  if (mc.contains("model_type")) {
    // The Llama family: HF's own config.json, whose reader checks every key.
    return parse_model_config(boost::json::serialize(mc), cat(path, ": model_config"));
  }
  // GPT-2: exactly the keys the writer writes: they and nothing else fix the layout.
  const boost::json::object expected = model_json(ModelConfig{});
  for (const auto& [key, value] : expected) {
    if (!mc.contains(key)) top.fail(cat("model_config.", std::string_view(key)), "missing");
  }
  for (const auto& [key, value] : mc) {
    if (!expected.contains(key)) top.fail(cat("model_config.", std::string_view(key)), "unknown key");
  }
  model_out = mc;
  return parse_model_config(boost::json::serialize(mc), cat(path, ": model_config"));
}

void check_params(JsonSection& top, const ModelLayout& layout, const std::string& path) {
  const boost::json::array& params = need_array(top, "params");
  const auto& expected = layout.params();
  if (params.size() != expected.size()) {
    top.fail("params", cat(params.size(), " tensors, the model_config's layout has ", expected.size()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    JsonSection p = element(params, i, "params", path);
    const ParamInfo& want = expected[i];
    const std::string name = need_string(p, "name");
    if (name != want.name) {
      p.fail("name", cat(describe_json(boost::json::string(name)), ", the model_config's layout has \"", want.name,
                         "\" here"));
    }
    const boost::json::array& shape = need_array(p, "shape");
    bool same_shape = shape.size() == want.shape.size();
    for (size_t d = 0; same_shape && d < shape.size(); ++d) {
      same_shape = shape[d].is_int64() && shape[d].get_int64() == want.shape[d];
    }
    if (!same_shape) {
      p.fail("shape", cat(describe_json(boost::json::value(shape)), " differs from the model_config's layout (",
                          describe_json(boost::json::value(boost::json::array(want.shape.begin(), want.shape.end()))),
                          ")"));
    }
    const uint64_t offset = need_uint(p, "offset"), numel = need_uint(p, "numel");
    if (offset != want.offset) p.fail("offset", cat(offset, ", the model_config's layout has ", want.offset));
    if (numel != want.numel) p.fail("numel", cat(numel, ", the model_config's layout has ", want.numel));
    p.finish();
  }
}

// Partitions: one [begin, end] per saved rank, begin <= end, each starting where the previous
// one ends, the first at 0 and the last ending at flat_size: every element held exactly once.
std::vector<std::pair<size_t, size_t>> read_partitions(JsonSection& top, int world_size, size_t flat_size,
                                                       const std::string& path) {
  const boost::json::array& list = need_array(top, "partitions");
  if (list.size() != size_t(world_size)) {
    top.fail("partitions", cat(list.size(), " partitions for world_size ", world_size));
  }
  std::vector<std::pair<size_t, size_t>> out;
  size_t expected_begin = 0;
  for (size_t r = 0; r < list.size(); ++r) {
    auto refuse = [&](const std::string& what) { throw UsageError(cat(path, ": partitions[", r, "]: ", what)); };
    const boost::json::value& p = list[r];
    if (!p.is_array() || p.get_array().size() != 2 || !p.get_array()[0].is_number() ||
        !p.get_array()[1].is_number()) {
      refuse(cat("expected [begin, end], got ", describe_json(p)));
    }
    size_t bounds[2];
    for (int i = 0; i < 2; ++i) {
      const boost::json::value& b = p.get_array()[size_t(i)];
      if (b.is_uint64()) bounds[i] = b.get_uint64();
      else if (b.is_int64() && b.get_int64() >= 0) bounds[i] = size_t(b.get_int64());
      else refuse(cat("expected [begin, end] of integers >= 0, got ", describe_json(p)));
    }
    const auto [begin, end] = bounds;
    if (begin > end) refuse(cat("begin ", begin, " > end ", end));
    if (begin != expected_begin) {
      refuse(cat("begins at ", begin, ", not at ", expected_begin,
                 r == 0 ? std::string(" (the partitions cover the flat buffer from 0)")
                        : cat(" where partitions[", r - 1, "] ends (they cover the flat buffer in rank order)")));
    }
    if (end > flat_size) refuse(cat("ends at ", end, ", past flat_size ", flat_size));
    if (r + 1 == list.size() && end != flat_size) {
      refuse(cat("the last partition ends at ", end, ", not at flat_size ", flat_size, " (elements no shard holds)"));
    }
    out.emplace_back(begin, end);
    expected_begin = end;
  }
  return out;
}

std::vector<ManifestFile> read_files(JsonSection& top, int world_size, int num_nodes, const std::string& path) {
  const boost::json::array& list = need_array(top, "files");
  if (list.size() != size_t(world_size) + 1) {
    top.fail("files", cat(list.size(), " listed, expected ", world_size + 1, " (a shard per rank of world_size ",
                          world_size, ", then model_states.h5)"));
  }
  std::vector<ManifestFile> out;
  for (size_t i = 0; i < list.size(); ++i) {
    JsonSection f = element(list, i, "files", path);
    ManifestFile file;
    file.name = need_string(f, "name");
    const std::string want = i < size_t(world_size) ? shard_name(int(i)) : std::string("model_states.h5");
    if (file.name != want) f.fail("name", cat(describe_json(boost::json::string(file.name)), ", expected \"", want, "\""));
    file.bytes = need_uint(f, "bytes");
    file.crc32 = uint32_t(need_uint(f, "crc32", UINT32_MAX));
    file.node = need_int<int>(f, "node", 0, num_nodes - 1);
    f.finish();
    out.push_back(std::move(file));
  }
  return out;
}

}  // namespace

std::string shard_name(int rank) { return cat("zero_rank_", rank, "_optim_states.h5"); }

boost::json::object model_json(const ModelConfig& m) {
  if (m.architecture() == Architecture::kLlama) return llama_family_json(m);
  return {{"n_layer", m.n_layer}, {"n_embd", m.n_embd}, {"n_head", m.n_head}, {"n_positions", m.n_positions},
          {"vocab_size", m.vocab_size}, {"layer_norm_epsilon", m.layer_norm_epsilon}};
}

std::string sign_manifest(boost::json::object manifest) {
  manifest.erase("manifest_crc32");
  ZT_CHECK(!manifest.empty(), "an empty manifest");
  std::string text = boost::json::serialize(manifest);
  text.pop_back();  // the closing brace: the checksum member goes before it
  return cat(text, kCrcMember, crc32_of(text), "}");
}

Manifest parse_manifest(std::string_view text, const std::string& path) {
  const boost::json::value json = parse_json_lenient(text, path);
  if (!json.is_object()) throw UsageError(cat(path, ": not a zerotrain checkpoint manifest (not a JSON object)"));
  const boost::json::object& m = json.get_object();
  Manifest out;
  out.checksummed = check_checksum(text, m, path);
  JsonSection top(&m, "", path);
  top.mark_read("manifest_crc32");
  std::string format;
  if (!top.read("format", format) || format != "zerotrain-checkpoint") {
    top.fail("format", "not \"zerotrain-checkpoint\": not a zerotrain checkpoint");
  }
  int64_t version = 0;
  if (!top.read("format_version", version) || version != kCheckpointFormatVersion) {
    top.fail("format_version", cat("unsupported format_version ", version, " (this zerotrain reads ",
                                   kCheckpointFormatVersion, ")"));
  }
  out.position.step = need_int<int64_t>(top, "step", 0, INT64_MAX);
  out.world_size = need_int<int>(top, "world_size", 1, INT32_MAX);
  out.stage = need_int<int>(top, "stage", 0, 3);
  const std::string dtype = need_string(top, "param_dtype");
  if (dtype == dtype_name(DType::kF32)) out.param_dtype = DType::kF32;
  else if (dtype == dtype_name(DType::kBF16)) out.param_dtype = DType::kBF16;
  else if (dtype == dtype_name(DType::kF16)) out.param_dtype = DType::kF16;
  else top.fail("param_dtype", cat(describe_json(boost::json::string(dtype)), " (expected fp32, bf16 or fp16)"));
  out.model = read_model(top, path, out.model_json);
  const std::unique_ptr<ModelLayout> layout_ptr = make_model_layout(out.model);
  const ModelLayout& layout = *layout_ptr;
  out.flat_size = need_int<size_t>(top, "flat_size", 0, INT64_MAX);
  if (out.flat_size != layout.flat_size()) {
    top.fail("flat_size", cat(out.flat_size, " does not match the model_config's layout (", layout.flat_size(), ")"));
  }
  out.ds_config_source = need_string(top, "ds_config_source");
  // Since issue 31; older checkpoints hold Adam's exp_avg and exp_avg_sq.
  if (std::string optimizer; top.read("optimizer", optimizer)) {
    using T = OptimizerConfig::Type;
    bool known = false;
    for (T t : {T::kAdam, T::kAdamW, T::kLion, T::kAdagrad, T::kLamb, T::kMuon, T::kAdafactor, T::kOneBitAdam,
              T::kZeroOneAdam, T::kOneBitLamb}) {
      if (optimizer == optimizer_name(t)) {
        out.optimizer = t;
        known = true;
      }
    }
    if (!known) {
      top.fail("optimizer", cat(describe_json(boost::json::string(optimizer)),
                                " (expected Adam, AdamW, Lion, Adagrad, Lamb, Muon, Adafactor, OneBitAdam, ZeroOneAdam "
                                "or OneBitLamb)"));
    }
  }

  JsonSection state = top.child("state");
  if (!state.present()) top.fail("state", "missing");
  out.position.data_position = need_uint(state, "data_position");
  out.position.seed = need_uint(state, "seed");
  out.adam_step = need_int<int64_t>(state, "adam_step", 0, INT64_MAX);
  out.scheduler_iteration = need_int<int64_t>(state, "scheduler_last_batch_iteration", -1, INT64_MAX);
  if (!state.read("loss_scale", out.scaler.scale, 0.0) || !(out.scaler.scale > 0)) {
    state.fail("loss_scale", "missing or not > 0");
  }
  out.scaler.cur_iter = need_int<int64_t>(state, "loss_scale_cur_iter", 0, INT64_MAX);
  out.scaler.last_overflow_iter = need_int<int64_t>(state, "loss_scale_last_overflow_iter", -1, INT64_MAX);
  out.scaler.cur_hysteresis = need_int<int>(state, "loss_scale_cur_hysteresis", 0, INT32_MAX);
  state.finish();

  check_params(top, layout, path);
  out.partitions = read_partitions(top, out.world_size, out.flat_size, path);
  top.read("node_local", out.node_local);
  top.read("num_nodes", out.num_nodes, 1, out.world_size);
  out.files = read_files(top, out.world_size, out.num_nodes, path);
  // What wrote the checkpoint (since issue 29; older manifests lack it): kept to be shown,
  // never compared, since a checkpoint resumes under any build that reads its format_version.
  if (const boost::json::value* build = top.raw("build"); build && !build->is_null()) {
    if (!build->is_object()) top.fail("build", cat("expected an object, got ", describe_json(*build)));
    out.build = build->get_object();
  }
  top.finish();
  return out;
}

}  // namespace zt

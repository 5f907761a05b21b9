#include "model/tensor_parallel.h"

#include <cstring>

#include "core/error.h"
#include "ops/device.h"

namespace brioche::model {

ModelConfig shard_config(const ModelConfig& full, ShardSpec s) {
  BRIOCHE_CHECK(s.size >= 1 && s.rank >= 0 && s.rank < s.size, "tensor parallel: rank ", s.rank, " of ", s.size,
                " (expected 0 <= rank < size)");
  auto check = [&](int n, const char* what) {
    BRIOCHE_CHECK(n % s.size == 0, "tensor parallel over ", s.size, " ranks: the model's ", what, " (", n,
                  ") is not divisible by ", s.size, "; choose a rank count that divides it");
  };
  check(full.n_heads, "attention head count");
  check(full.n_kv_heads, "KV head count");
  check(full.intermediate_size, "intermediate size");
  ModelConfig c = full;
  c.n_heads /= s.size;
  c.n_kv_heads /= s.size;
  c.intermediate_size /= s.size;
  return c;
}

Tensor copy_rows(const Tensor& w, int64_t begin, int64_t end) {
  BRIOCHE_CHECK(w.device() == Device::CPU && w.rank() >= 1 && begin >= 0 && begin <= end && end <= w.dim(0),
                "copy_rows: rows [", begin, ", ", end, ") of ", w.describe(), " (expected a CPU tensor with them)");
  if (w.rank() == 1) {
    Tensor out = Tensor::zeros(w.dtype(), {end - begin});
    std::memcpy(out.data(), static_cast<const char*>(w.data()) + row_bytes(w.dtype(), begin),
                row_bytes(w.dtype(), end - begin));
    return out;
  }
  Tensor out = Tensor::zeros(w.dtype(), {end - begin, w.dim(1)});
  const size_t bytes = row_bytes(w.dtype(), w.dim(1));
  for (int64_t r = begin; r < end; ++r) std::memcpy(out.row_ptr(r - begin), w.row_ptr(r), bytes);
  return out;
}

Tensor copy_columns(const Tensor& w, int64_t begin, int64_t end, const std::string& what) {
  BRIOCHE_CHECK(w.device() == Device::CPU && w.rank() == 2 && begin >= 0 && begin <= end && end <= w.dim(1),
                "copy_columns: columns [", begin, ", ", end, ") of ", what, " ", w.describe(),
                " (expected a CPU matrix with them)");
  const int block = dtype_info(w.dtype()).block_elems;
  for (int64_t col : {begin, end})
    BRIOCHE_CHECK(col % block == 0, "tensor parallel: ", what, " ", w.describe(), " would be split at column ", col,
                  ", inside a ", dtype_name(w.dtype()), " block of ", block,
                  " columns (a shard's columns must be whole blocks)");
  Tensor out = Tensor::zeros(w.dtype(), {w.dim(0), end - begin});
  const size_t offset = row_bytes(w.dtype(), begin), bytes = row_bytes(w.dtype(), end - begin);
  for (int64_t r = 0; r < w.dim(0); ++r)
    std::memcpy(out.row_ptr(r), static_cast<const char*>(w.row_ptr(r)) + offset, bytes);
  return out;
}

Checkpoint shard_checkpoint(const Checkpoint& full, ShardSpec s) {
  const ModelConfig& f = full.config;
  Checkpoint out;
  out.config = shard_config(f, s);
  out.gguf = full.gguf;
  out.directory = full.directory;
  out.chat_template = full.chat_template;
  out.source =
      full.source + " (tensor-parallel shard " + std::to_string(s.rank) + " of " + std::to_string(s.size) + ")";
  const ModelConfig& c = out.config;
  const int64_t q0 = int64_t(s.rank) * c.q_dim(), q1 = q0 + c.q_dim();
  const int64_t kv0 = int64_t(s.rank) * c.kv_dim(), kv1 = kv0 + c.kv_dim();
  const int64_t i0 = int64_t(s.rank) * c.intermediate_size, i1 = i0 + c.intermediate_size;
  const ModelWeights& w = full.weights;
  ModelWeights& o = out.weights;
  o.token_embd = w.token_embd;
  o.output = w.output;
  o.output_norm = w.output_norm;
  auto rows = [](const Tensor& t, int64_t b, int64_t e) { return t.defined() ? copy_rows(t, b, e) : Tensor(); };
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    const std::string layer = "layer " + std::to_string(l) + " ";
    LayerWeights sl;
    sl.attn_norm = lw.attn_norm;
    sl.ffn_norm = lw.ffn_norm;
    sl.q_norm = lw.q_norm;  // per head_dim: the same for every head
    sl.k_norm = lw.k_norm;
    sl.bo = lw.bo;  // added once, after the all-reduce
    sl.wq = copy_rows(lw.wq, q0, q1);
    sl.wk = copy_rows(lw.wk, kv0, kv1);
    sl.wv = copy_rows(lw.wv, kv0, kv1);
    sl.bq = rows(lw.bq, q0, q1);
    sl.bk = rows(lw.bk, kv0, kv1);
    sl.bv = rows(lw.bv, kv0, kv1);
    sl.wo = copy_columns(lw.wo, q0, q1, layer + "o_proj");
    sl.w_gate = copy_rows(lw.w_gate, i0, i1);
    sl.w_up = copy_rows(lw.w_up, i0, i1);
    sl.w_down = copy_columns(lw.w_down, i0, i1, layer + "down_proj");
    o.layers.push_back(std::move(sl));
  }
  return out;
}

// ---------------------------------------------------------------------------
// The wire format.

namespace tp_wire {

void encode(const ForwardBatch& b, const KvCache& cache, std::vector<int32_t>& header, std::vector<int32_t>& payload) {
  const int32_t n = b.n_rows();
  payload.clear();
  payload.insert(payload.end(), b.tokens.begin(), b.tokens.end());
  payload.insert(payload.end(), b.positions.begin(), b.positions.end());
  payload.insert(payload.end(), b.wants_logits.begin(), b.wants_logits.end());
  for (const SequenceView& s : b.sequences) {
    payload.insert(payload.end(), {s.first_row, s.n_rows, s.n_past, int32_t(s.block_table.size())});
  }
  for (const SequenceView& s : b.sequences) payload.insert(payload.end(), s.block_table.begin(), s.block_table.end());
  header.assign(kHeaderWords, 0);
  header[kKind] = kForward;
  header[kRows] = n;
  header[kSequences] = int32_t(b.sequences.size());
  header[kPayloadWords] = int32_t(payload.size());
  header[kBlocks] = cache.n_blocks();
  header[kBlockSize] = cache.block_size();
  header[kCacheDType] = int32_t(cache.dtype());
}

ForwardBatch decode(const std::vector<int32_t>& header, const std::vector<int32_t>& payload) {
  const int32_t n = header[kRows], n_seq = header[kSequences];
  BRIOCHE_CHECK(header[kKind] == kForward && n >= 0 && n_seq >= 0 && size_t(3 * n + 4 * n_seq) <= payload.size(),
                "tensor parallel: malformed batch message (kind ", header[kKind], ", ", n, " rows, ", n_seq,
                " sequences, ", payload.size(), " payload words)");
  ForwardBatch b;
  const int32_t* p = payload.data();
  b.tokens.assign(p, p + n);
  b.positions.assign(p + n, p + 2 * n);
  b.wants_logits.assign(p + 2 * n, p + 3 * n);
  const int32_t* seq = p + 3 * n;
  size_t table = size_t(3 * n + 4 * n_seq);
  for (int32_t i = 0; i < n_seq; ++i, seq += 4) {
    const size_t len = size_t(seq[3]);
    BRIOCHE_CHECK(table + len <= payload.size(), "tensor parallel: block table of sequence ", i,
                  " runs past the message");
    b.sequences.push_back({.first_row = seq[0],
                           .n_rows = seq[1],
                           .n_past = seq[2],
                           .block_table = std::span<const int32_t>(payload.data() + table, len)});
    table += len;
  }
  return b;
}

}  // namespace tp_wire

// ---------------------------------------------------------------------------
// Rank 0 and the workers.

TensorParallelModel::TensorParallelModel(std::unique_ptr<LlamaModel> shard, std::unique_ptr<ops::Collective> collective)
    : collective_(std::move(collective)), shard_(std::move(shard)) {
  BRIOCHE_CHECK(collective_ && collective_->rank() == 0, "TensorParallelModel runs on rank 0 only");
  shard_->set_collective(collective_.get());
}

TensorParallelModel::~TensorParallelModel() {
  try {
    std::vector<int32_t> stop(tp_wire::kHeaderWords, 0);
    stop[tp_wire::kKind] = tp_wire::kStop;
    collective_->broadcast(stop, 0);
    ops::synchronize(shard_->device());
  } catch (const std::exception&) {
    // The workers are gone already (they failed and said why).
  }
  // Decode graphs hold NCCL references: gone before the communicator
  // (members die in reverse order, but say it where it matters).
  shard_->set_collective(nullptr);
}

void TensorParallelModel::forward(const ForwardBatch& batch, KvCache& cache, Tensor& logits) {
  std::vector<int32_t> header;
  tp_wire::encode(batch, cache, header, message_);
  collective_->broadcast(header, 0);
  collective_->broadcast(message_, 0);
  shard_->forward(batch, cache, logits);
}

int64_t run_tensor_parallel_worker(LlamaModel& shard, ops::Collective& collective) {
  BRIOCHE_CHECK(collective.rank() != 0, "run_tensor_parallel_worker: rank 0 drives the batches itself");
  shard.set_collective(&collective);
  // On every way out (stop or error) the shard forgets the collective and
  // drops its decode graphs: a graph that recorded NCCL calls keeps
  // ncclCommDestroy waiting forever, and the caller may destroy the
  // collective before the shard (the hang of the first 2-GPU run).
  struct Detach {
    LlamaModel& shard;
    ~Detach() { shard.set_collective(nullptr); }
  } detach{shard};
  std::unique_ptr<KvCache> cache;
  Tensor logits = ops::zeros(DType::F32, {1, shard.config().vocab_size}, shard.device());  // stays on the device
  std::vector<int32_t> header(tp_wire::kHeaderWords), payload;
  int64_t forwards = 0;
  for (;;) {
    collective.broadcast(header, 0);
    if (header[tp_wire::kKind] == tp_wire::kStop) break;
    BRIOCHE_CHECK(header[tp_wire::kKind] == tp_wire::kForward, "tensor parallel: rank ", collective.rank(),
                  " received an unknown message kind ", header[tp_wire::kKind]);
    payload.resize(size_t(header[tp_wire::kPayloadWords]));
    collective.broadcast(payload, 0);
    const KvCacheOptions want{.block_size = header[tp_wire::kBlockSize],
                              .n_blocks = header[tp_wire::kBlocks],
                              .dtype = DType(header[tp_wire::kCacheDType]),
                              .device = shard.device()};
    if (!cache || cache->n_blocks() != want.n_blocks || cache->block_size() != want.block_size ||
        cache->dtype() != want.dtype) {
      cache.reset();  // free the old one first: two may not fit
      cache = std::make_unique<KvCache>(shard.config(), want);
    }
    const ForwardBatch batch = tp_wire::decode(header, payload);
    shard.forward(batch, *cache, logits);
    ++forwards;
  }
  return forwards;
}

}  // namespace brioche::model

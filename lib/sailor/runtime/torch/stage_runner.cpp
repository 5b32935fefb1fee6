#include "sailor/runtime/torch/stage_runner.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <torch/torch.h>

#include "common/error.h"
#include "common/safetensors.h"
#include "model/torch/compute_device.h"
#include "model/torch/llama.h"
#include "model/torch/tensor_bridge.h"
#include "model/torch/tensor_parallel.h"
#include "model/torch/torch_compat.h"
#include "model/torch/training_parts.h"
#include "sailor/pipeline_schedule.h"
#include "sailor/runtime/layout.h"
#include "sailor/runtime/torch/communicator.h"

namespace fleet::sailor::runtime {

StageRunner::StageRunner(const Layout& layout, int rank, Communicator* comm, model::LlamaModel& model,
                         const model::TrainingData& data, const model::TrainOptions& options, torch::Device device)
    : layout_(layout),
      place_(layout.place(rank)),
      stage_(layout.stages[static_cast<std::size_t>(place_.stage)]),
      comm_(comm),
      model_(model),
      data_(data),
      options_(options),
      device_(device) {
  const int blocks = static_cast<int>(model.num_layers());
  is_first_ = place_.stage == 0;
  is_last_ = place_.stage == layout.pipeline_stages() - 1;
  // A tied model trains with the head's copy of the embedding as its own
  // leaf in every layout: the two uses' gradients are summed exactly (in
  // float64), whether both sit on this stage or on two.
  auto head_copy = model_.separate_tied_head();
  model_.keep_only_layers(stage_.first, stage_.last);
  build_groups();
  if (tp_group_) {
    model_.shard_for_tensor_parallel(*tp_group_);
    head_copy = model_.separate_tied_head();  // the head's slice
  }
  params_ = model_.named_parameters(stage_.first, stage_.last);
  const bool tied = model.config().tie_word_embeddings;
  tied_copy_ = tied && stage_.first > 0 && stage_.last == blocks + 2;
  if (tied && stage_.first == 0 && stage_.last == blocks + 2) local_head_copy_ = head_copy;
  for (auto& [name, p] : params_) p.set_requires_grad(true);
  if (local_head_copy_.defined()) local_head_copy_.set_requires_grad(true);
  build_buckets();
  if (dp_group_) register_overlap_hooks();
}

torch::Tensor StageRunner::gather_whole(const std::string& name, const torch::Tensor& t) {
  torch::NoGradGuard no_grad;
  auto local = t.detach().to(torch::kCPU, torch::kFloat32);
  const auto spec =
      tp_group_ ? model::shard_spec(model_.config(), name, place_.tp_rank, stage_.tp) : model::ShardSpec{};
  if (spec.dim < 0) return local.clone(torch::MemoryFormat::Contiguous);
  auto sizes = local.sizes().vec();
  sizes[static_cast<std::size_t>(spec.dim)] = spec.full;
  auto whole = torch::zeros(sizes, torch::kFloat32);
  whole.narrow(spec.dim, spec.offset, spec.length).copy_(local);
  tp_group_->all_reduce_sum(whole);
  return whole;
}

torch::Tensor StageRunner::slice_of(const std::string& name, const torch::Tensor& whole) const {
  if (!tp_group_) return whole;
  const auto spec = model::shard_spec(model_.config(), name, place_.tp_rank, stage_.tp);
  return spec.dim < 0 ? whole : whole.narrow(spec.dim, spec.offset, spec.length).clone();
}

// One step's micro-batches in flight on this rank, and whom it talks to.
struct StageRunner::StepState {
  std::int64_t step = 0;
  std::int64_t divisor = 0;  ///< target tokens of the whole global batch
  std::vector<torch::Tensor> received, outputs;
  std::vector<c10::intrusive_ptr<c10d::Work>> sends;
  double loss_sum = 0;
  // Every TP rank holds the whole activation between stages, so TP rank t
  // receives from rank t mod (the neighbour's TP degree) and sends to each
  // neighbour rank that maps onto it: t to t when the degrees are equal.
  int prev = -1, next = -1;
  std::vector<int> prev_all, next_all;
};

double StageRunner::run_step(std::int64_t step, StepTimes& times) {
  StepState st;
  st.step = step;
  st.divisor = model::loss_tokens(data_, options_, step, layout_.global_batch);
  if (st.divisor == 0) throw InputError(fmt::format("step {}'s batch holds no token to train on", step + 1));
  const int micro_batches = layout_.micro_batches(place_.replica);
  const auto ops = one_f_one_b(place_.stage, layout_.pipeline_stages(), micro_batches);
  st.received.resize(static_cast<std::size_t>(micro_batches));
  st.outputs.resize(static_cast<std::size_t>(micro_batches));
  for (auto& flat : flat_grads_) flat.zero_();
  if (!is_first_) {
    st.prev = neighbour_rank(place_.stage - 1);
    st.prev_all = ranks_fed_by_me(place_.stage - 1);
  }
  if (!is_last_) {
    st.next = neighbour_rank(place_.stage + 1);
    st.next_all = ranks_fed_by_me(place_.stage + 1);
  }
  for (const auto& op : ops) {
    // The last backward of the step: each bucket's all-reduce starts as
    // soon as the backward has produced every gradient in it.
    if (&op == &ops.back() && dp_group_) start_overlap();
    if (op.kind == PipelineOp::Kind::kForward)
      forward_micro_batch(op.micro, st, times);
    else
      backward_micro_batch(op.micro, st, times);
  }
  auto t = Clock::now();
  for (auto& w : st.sends) comm_->world().wait(w);
  times.add(times.send, t, "wait for sends", "send");
  t = Clock::now();
  reduce_gradients();
  times.add(times.allreduce, t, "all-reduce", "allreduce");
  return st.loss_sum;
}

void StageRunner::forward_micro_batch(int micro, StepState& st, StepTimes& times) {
  const auto m = static_cast<std::size_t>(micro);
  const auto [first, last] = layout_.micro_batch(place_.replica, micro);
  model::Batch batch;
  if (is_first_ || is_last_)
    batch = model::sample_sequences(data_, options_, st.step, first, last - first, model_.config().pad_token_id);
  torch::Tensor input;
  if (is_first_) {
    input = batch.tokens.to(device_);
  } else {
    auto t = Clock::now();
    input = torch::empty({last - first, options_.seq_len, model_.config().hidden_size}, torch::kFloat32);
    comm_->world().recv(input, st.prev, 2 * micro);
    times.add(times.recv, t, "recv act " + std::to_string(micro), "recv");
    // The received leaf goes through a view, so the gradients of its
    // consumers add up in the same autograd buffer, in the same order,
    // as they do when the previous layer runs in this process.
    st.received[m] = input.to(device_).requires_grad_(true);
    input = st.received[m].view_as(st.received[m]);
  }
  auto t = Clock::now();
  auto output = model_.forward_layers(input, stage_.first, stage_.last);
  if (is_last_) {
    batch.tokens = batch.tokens.to(device_);
    batch.mask = batch.mask.to(device_);
    const auto divisor = static_cast<double>(st.divisor);
    output = tp_group_ ? model::vocab_parallel_batch_loss(output, batch, divisor, model_.vocab_start(), *tp_group_)
                       : model::batch_loss(output.to(torch::kFloat32), batch, divisor);
    // Every TP rank has the whole loss; one of them reports it.
    if (place_.tp_rank == 0) st.loss_sum += output.item<double>();
  }
  times.add(times.compute, t, "F" + std::to_string(micro), "forward");
  if (!is_last_) {
    t = Clock::now();
    auto out = output.detach().to(torch::kCPU, torch::kFloat32).contiguous();
    for (int to : st.next_all) st.sends.push_back(comm_->world().send(out, to, 2 * micro));
    times.add(times.send, t, "send act " + std::to_string(micro), "send");
  }
  st.outputs[m] = output;
}

void StageRunner::backward_micro_batch(int micro, StepState& st, StepTimes& times) {
  const auto m = static_cast<std::size_t>(micro);
  auto t = Clock::now();
  if (is_last_) {
    st.outputs[m].backward();
  } else {
    auto grad = torch::empty(st.outputs[m].sizes(), torch::kFloat32);
    comm_->world().recv(grad, st.next, 2 * micro + 1);
    times.add(times.recv, t, "recv grad " + std::to_string(micro), "recv");
    t = Clock::now();
    st.outputs[m].backward(grad.to(device_, st.outputs[m].scalar_type()));
  }
  overlap_ = false;
  accumulate_gradients();
  times.add(times.compute, t, "B" + std::to_string(micro), "backward");
  if (!is_first_) {
    t = Clock::now();
    auto g = st.received[m].grad().to(torch::kCPU, torch::kFloat32).contiguous();
    for (int to : st.prev_all) st.sends.push_back(comm_->world().send(g, to, 2 * micro + 1));
    times.add(times.send, t, "send grad " + std::to_string(micro), "send");
  }
  st.received[m] = torch::Tensor();
  st.outputs[m] = torch::Tensor();
}

double StageRunner::gradient_sum_of_squares() const {
  std::vector<torch::Tensor> parts;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (tied_copy_ && params_[i].first == kTiedName) continue;
    // Under TP the norms are whole on every rank: rank 0 counts them.
    if (tp_group_ && params_[i].second.dim() < 2 && place_.tp_rank != 0) continue;
    parts.push_back(grad_views_[i].pow(2).sum());
  }
  // Summed in parameter order, as before, with one read of the result.
  double total = 0;
  if (!parts.empty()) {
    const auto values = torch::stack(parts).cpu();
    const double* v = values.data_ptr<double>();
    for (std::size_t i = 0; i < parts.size(); ++i) total += v[i];
  }
  return total;
}

void StageRunner::retire_groups(RetiredGroups& retired) {
  retired.retire(std::move(tp_group_));
  retired.retire(std::move(dp_group_));
  retired.retire(std::move(embedding_group_));
}

model::ShardSpec StageRunner::slice_spec(const std::string& name) const {
  // From the layout, not the group: it still holds after retire_groups().
  return stage_.tp > 1 ? model::shard_spec(model_.config(), name, place_.tp_rank, stage_.tp) : model::ShardSpec{};
}

void StageRunner::load_parameters(const std::filesystem::path& dir) {
  torch::NoGradGuard no_grad;
  auto whole = model::LlamaModel::load_layers(dir, stage_.first, stage_.last);
  std::map<std::string, torch::Tensor> by_name;
  for (auto& [name, t] : whole.named_parameters(stage_.first, stage_.last)) by_name[name] = t;
  for (auto& [name, p] : params_) p.copy_(slice_of(name, by_name.at(name)));
}

void StageRunner::after_update() {
  torch::NoGradGuard no_grad;
  if (local_head_copy_.defined()) local_head_copy_.copy_(params_.front().second);
  for (const auto& [name, p] : params_) p.mutable_grad() = torch::Tensor();
}

int StageRunner::neighbour_rank(int stage) const {
  return layout_.rank_of(stage, place_.replica, place_.tp_rank % layout_.stages[static_cast<std::size_t>(stage)].tp);
}

std::vector<int> StageRunner::ranks_fed_by_me(int stage) const {
  std::vector<int> ranks;
  for (int t = 0; t < layout_.stages[static_cast<std::size_t>(stage)].tp; ++t)
    if (t % stage_.tp == place_.tp_rank) ranks.push_back(layout_.rank_of(stage, place_.replica, t));
  return ranks;
}

void StageRunner::build_groups() {
  if (comm_ == nullptr) return;
  // Every rank walks the same list of groups in the same order and joins
  // those it belongs to, so group construction never deadlocks.
  const int stages = layout_.pipeline_stages();
  for (int s = 0; s < stages; ++s) {
    for (int tp = 0; tp < layout_.stages[static_cast<std::size_t>(s)].tp; ++tp) {
      std::vector<int> ranks;
      for (int r = 0; r < layout_.dp; ++r) ranks.push_back(layout_.rank_of(s, r, tp));
      if (s == place_.stage && tp == place_.tp_rank && layout_.dp > 1)
        dp_group_ = comm_->group(fmt::format("dp/{}/{}", s, tp), ranks);
    }
  }
  const bool tied = model_.config().tie_word_embeddings && stages > 1;
  if (tied && layout_.stages.front().tp != layout_.stages.back().tp)
    throw UsageError(
        fmt::format("the model ties its embedding and LM head, so its first and last stage need the "
                    "same TP degree (the plan has {} and {})",
                    layout_.stages.front().tp, layout_.stages.back().tp));
  const int tp = stage_.tp;
  for (int r = 0; tied && r < layout_.dp; ++r) {
    for (int t = 0; t < tp; ++t) {
      std::vector<int> ranks{layout_.rank_of(0, r, t), layout_.rank_of(stages - 1, r, t)};
      if (r == place_.replica && t == place_.tp_rank && (is_first_ || is_last_))
        embedding_group_ = comm_->group(fmt::format("embedding/{}/{}", r, t), ranks);
    }
  }
  if (tp > 1) {
    std::vector<int> ranks;
    for (int t = 0; t < tp; ++t) ranks.push_back(layout_.rank_of(place_.stage, place_.replica, t));
    tp_group_ = std::make_unique<TensorParallelGroupAdapter>(
        comm_->group(fmt::format("tp/{}/{}", place_.stage, place_.replica), ranks), place_.tp_rank);
  }
}

void StageRunner::build_buckets() {
  // The sums cross processes through Gloo, which reduces CPU tensors; with
  // nothing to reduce them with they stay beside the gradients (on a GPU,
  // copying every gradient to the host and back each micro-batch would
  // cost more than the step's compute for small models).
  sum_device_ = dp_group_ || embedding_group_ ? torch::Device(torch::kCPU) : device_;
  std::vector<std::vector<std::size_t>> buckets;
  std::int64_t bytes = kBucketBytes;
  for (std::size_t i = params_.size(); i-- > 0;) {
    const std::int64_t size = params_[i].second.numel() * 8;
    if (bytes + size > kBucketBytes) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(i);
    bytes += size;
  }
  grad_views_.resize(params_.size());
  bucket_of_.resize(params_.size());
  added_by_hook_.assign(params_.size(), false);
  for (const auto& bucket : buckets) {
    for (auto i : bucket) bucket_of_[i] = flat_grads_.size();
    std::int64_t total = 0;
    for (auto i : bucket) total += params_[i].second.numel();
    flat_grads_.push_back(torch::zeros({total}, torch::TensorOptions().dtype(torch::kFloat64).device(sum_device_)));
    std::int64_t offset = 0;
    for (auto i : bucket) {
      const auto& p = params_[i].second;
      grad_views_[i] = flat_grads_.back().narrow(0, offset, p.numel()).view(p.sizes());
      offset += p.numel();
    }
  }
}

void StageRunner::accumulate_gradients() {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i].second;
    if (!p.grad().defined()) continue;
    if (!added_by_hook_[i]) grad_views_[i].add_(p.grad().to(sum_device_, torch::kFloat64));
    p.mutable_grad() = torch::Tensor();
    added_by_hook_[i] = false;
  }
  if (local_head_copy_.defined() && local_head_copy_.grad().defined()) {
    if (!head_added_by_hook_) grad_views_.front().add_(local_head_copy_.grad().to(sum_device_, torch::kFloat64));
    local_head_copy_.mutable_grad() = torch::Tensor();
  }
  head_added_by_hook_ = false;
}

void StageRunner::register_overlap_hooks() {
  for (std::size_t i = 0; i < params_.size(); ++i)
    params_[i].second.register_hook([this, i](const torch::Tensor& grad) {
      if (!overlap_) return;
      torch::NoGradGuard no_grad;
      grad_views_[i].add_(grad.to(sum_device_, torch::kFloat64));
      added_by_hook_[i] = true;
      contributed(bucket_of_[i]);
    });
  if (local_head_copy_.defined())
    local_head_copy_.register_hook([this](const torch::Tensor& grad) {
      if (!overlap_) return;
      torch::NoGradGuard no_grad;
      grad_views_.front().add_(grad.to(sum_device_, torch::kFloat64));
      head_added_by_hook_ = true;
      contributed(bucket_of_.front());
    });
}

void StageRunner::start_overlap() {
  overlap_ = true;
  std::fill(added_by_hook_.begin(), added_by_hook_.end(), false);
  head_added_by_hook_ = false;
  pending_.assign(flat_grads_.size(), 0);
  for (auto b : bucket_of_) ++pending_[b];
  if (local_head_copy_.defined()) ++pending_[bucket_of_.front()];
  bucket_works_.assign(flat_grads_.size(), c10::intrusive_ptr<c10d::Work>());
}

void StageRunner::contributed(std::size_t bucket) {
  if (--pending_[bucket] == 0) bucket_works_[bucket] = dp_group_->all_reduce_sum_async(flat_grads_[bucket]);
}

void StageRunner::reduce_gradients() {
  torch::NoGradGuard no_grad;
  if (dp_group_) {
    // Buckets with a parameter that got no gradient start now, in order.
    for (std::size_t b = 0; b < flat_grads_.size(); ++b)
      if (!bucket_works_[b]) bucket_works_[b] = dp_group_->all_reduce_sum_async(flat_grads_[b]);
    for (auto& w : bucket_works_) dp_group_->wait(w);
  }
  if (embedding_group_) {
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (params_[i].first != kTiedName) continue;
      auto g = grad_views_[i].contiguous();
      embedding_group_->all_reduce_sum(g);
      grad_views_[i].copy_(g);
    }
  }
  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i].second;
    p.mutable_grad() = grad_views_[i].to(p.device(), p.scalar_type());
  }
}

}  // namespace fleet::sailor::runtime

#include "sailor/runtime/torch/elastic_worker.h"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "common/error.h"
#include "common/logging.h"
#include "sailor/runtime/torch/control_store.h"

namespace fleet::sailor::runtime {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(10);
constexpr auto kHeartbeatEvery = std::chrono::milliseconds(500);

std::vector<std::uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<std::uint8_t>& b) { return {b.begin(), b.end()}; }

c10::intrusive_ptr<c10d::TCPStore> connect(const std::string& host, int port, std::chrono::milliseconds timeout) {
  return open_store("the elastic controller", host, port, false, timeout);
}

int environment_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) throw UsageError(fmt::format("{} is not set (the elastic launcher sets it)", name));
  try {
    return std::stoi(v);
  } catch (const std::exception&) {
    throw UsageError(fmt::format("{}={} is not a number", name, v));
  }
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  while (begin < s.size()) {
    const auto end = s.find('\n', begin);
    out.push_back(s.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return out;
}

}  // namespace

std::unique_ptr<ElasticWorker> ElasticWorker::from_environment(std::chrono::milliseconds timeout) {
  const char* control = std::getenv("SAILOR_CONTROL");
  if (control == nullptr || *control == '\0') return nullptr;
  const auto [host, port] = parse_host_port(control);
  if (std::getenv("SAILOR_WORKER_ID") == nullptr) {
    // Started by someone else (an srun step): take the next worker id.
    auto store = connect(host, port, timeout);
    const int id = static_cast<int>(store->add(control_keys::kRegistered, 1) - 1);
    spdlog::info("registered with the elastic controller at {}:{} as worker {}", host, port, id);
    return std::unique_ptr<ElasticWorker>(new ElasticWorker(id, -1, host, port, timeout));
  }
  const int generation = std::getenv("SAILOR_GENERATION") != nullptr ? environment_int("SAILOR_GENERATION") : 0;
  return std::unique_ptr<ElasticWorker>(
      new ElasticWorker(environment_int("SAILOR_WORKER_ID"), generation, host, port, timeout));
}

ElasticWorker::ElasticWorker(int worker, int generation, std::string host, int port, std::chrono::milliseconds timeout)
    : worker_(worker),
      first_generation_(generation),
      host_(std::move(host)),
      port_(port),
      timeout_(timeout),
      store_(connect(host_, port_, timeout)),
      watched_(std::max(generation, 0)) {
  ignore_broken_pipes();  // the controller's store may go away under the watcher
  interrupts_.push_back(std::make_unique<Interrupt>());
  interrupt_ = interrupts_.back().get();
  // Its own connection: the training thread uses the other one.
  auto watcher_store = connect(host_, port_, timeout);
  watcher_ = std::thread([this, s = std::move(watcher_store)] {
    auto last_beat = Clock::now() - kHeartbeatEvery;
    while (!stop_) {
      try {
        if (Clock::now() - last_beat >= kHeartbeatEvery) {
          s->add(control_keys::heartbeat(worker_), 1);
          last_beat = Clock::now();
        }
        if (s->check({control_keys::kGeneration})) {
          const int current = std::stoi(text(s->get(control_keys::kGeneration)));
          if (current > watched_) interrupt_.load()->raise();
        }
      } catch (const std::exception& e) {
        // The controller is gone: no generation will follow; end every wait.
        spdlog::error("worker {}: lost the elastic controller: {}", worker_, std::string(e.what()).substr(0, 200));
        interrupt_.load()->raise();
        return;
      }
      std::this_thread::sleep_for(kPoll);
    }
  });
}

ElasticWorker::~ElasticWorker() {
  stop_ = true;
  if (watcher_.joinable()) watcher_.join();
}

void ElasticWorker::watch(int generation) {
  // First the generation, then the fresh interrupt: the watcher may still
  // raise the old one, never the new one for the generation it serves.
  watched_ = generation;
  interrupts_.push_back(std::make_unique<Interrupt>());
  interrupt_ = interrupts_.back().get();
}

std::string ElasticWorker::get(const std::string& key) { return text(store_->get(key)); }

bool ElasticWorker::wait_key(const std::string& key, bool interruptible) {
  const auto deadline = Clock::now() + timeout_;
  while (!store_->check({key})) {
    if (interruptible && interrupt_.load()->raised()) return false;
    if (Clock::now() > deadline)
      throw RuntimeFailure(fmt::format("worker {}: the elastic controller did not publish {} within {} s", worker_, key,
                                       timeout_.count() / 1000));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

Membership ElasticWorker::membership(int generation) {
  const std::string key = control_keys::generation_prefix(generation) + "members";
  wait_key(key, false);
  return Membership::from_json(generation, get(key));
}

Membership ElasticWorker::first_membership() {
  if (first_generation_ >= 0) return membership(first_generation_);
  const auto deadline = Clock::now() + timeout_;
  int generation = -1;
  for (;;) {
    if (store_->check({control_keys::kStopped}))
      throw RuntimeFailure("the elastic job stopped: " + get(control_keys::kStopped));
    if (store_->check({control_keys::kGeneration})) {
      const int current = std::stoi(get(control_keys::kGeneration));
      if (current > generation) {
        generation = current;
        Membership m = membership(current);
        if (m.member_rank_of(worker_) >= 0) {
          first_generation_ = current;
          watch(current);
          return m;
        }
      }
    }
    if (Clock::now() > deadline)
      throw RuntimeFailure(fmt::format("worker {}: no generation of the elastic job took it within {} s", worker_,
                                       timeout_.count() / 1000));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::optional<Membership> ElasticWorker::next_generation(int generation) {
  const auto deadline = Clock::now() + timeout_;
  for (;;) {
    if (store_->check({control_keys::kDone})) return std::nullopt;
    if (store_->check({control_keys::kStopped}))
      throw RuntimeFailure("the elastic job stopped: " + get(control_keys::kStopped));
    if (store_->check({control_keys::kGeneration})) {
      const int current = std::stoi(get(control_keys::kGeneration));
      if (current > generation) {
        watch(current);
        return membership(current);
      }
    }
    if (Clock::now() > deadline)
      throw RuntimeFailure(fmt::format("worker {}: no new generation within {} s after generation {} ended", worker_,
                                       timeout_.count() / 1000, generation));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void ElasticWorker::report_failure(int generation) {
  try {
    store_->add(control_keys::generation_prefix(generation) + "failures", 1);
  } catch (const std::exception&) {
  }
}

bool ElasticWorker::commit(int generation, std::int64_t step, int ranks) {
  const std::string prefix = control_keys::generation_prefix(generation) + fmt::format("commit/{}/", step);
  // Whoever decides first wins: the rank that completes the count commits,
  // a rank whose generation ended first aborts; everyone then reads the one decision.
  auto decide = [&](const char* proposal) {
    const auto decided = text(store_->compareSet(prefix + "decision", {}, bytes(proposal)));
    store_->set(prefix + "decided", bytes("1"));
    return decided == "commit";
  };
  bool committed;
  if (store_->add(prefix + "count", 1) == ranks)
    committed = decide("commit");
  else if (!wait_key(prefix + "decided", true))
    committed = decide("abort");
  else
    committed = get(prefix + "decision") == "commit";
  // Every rank read the previous step's decision before counting itself in
  // for this one: the first rank drops those keys, so the store stays small.
  if (committed && step > 0 && ranks > 0) {
    const std::string previous = control_keys::generation_prefix(generation) + fmt::format("commit/{}/", step - 1);
    if (store_->add(prefix + "cleaner", 1) == 1)
      for (const char* k : {"count", "decision", "decided", "cleaner"}) store_->deleteKey(previous + k);
  }
  return committed;
}

bool ElasticWorker::stop_requested(int generation) {
  return store_->check({control_keys::generation_prefix(generation) + "stop"});
}

void ElasticWorker::report_boundary(int generation, std::int64_t step, const std::vector<int>& leaving) {
  store_->set(control_keys::generation_prefix(generation) + "boundary",
              bytes(nlohmann::json{{"step", step}, {"leaving", leaving}}.dump()));
}

void ElasticWorker::report_ready(int generation, double seconds, const std::string& from) {
  store_->set(control_keys::generation_prefix(generation) + "ready",
              bytes(nlohmann::json{{"handover_s", seconds}, {"from", from}}.dump()));
}

void ElasticWorker::report_saved(int generation, std::int64_t step) {
  store_->set(control_keys::generation_prefix(generation) + "saved", bytes(std::to_string(step)));
}

void ElasticWorker::report_done() { store_->set(control_keys::kDone, bytes("1")); }

namespace {

// One line of what a member holds or needs: "name\tdim\toffset\tlength\tfull".
std::string describe_piece(const std::string& name, const model::ShardSpec& spec) {
  return fmt::format("{}\t{}\t{}\t{}\t{}", name, spec.dim, spec.offset, spec.length, spec.full);
}

struct Piece {
  std::string name;
  model::ShardSpec spec;
};

Piece parse_piece(const std::string& line) {
  Piece p;
  std::size_t at = 0;
  auto field = [&] {
    const auto tab = line.find('\t', at);
    std::string f = line.substr(at, tab == std::string::npos ? std::string::npos : tab - at);
    at = tab == std::string::npos ? line.size() : tab + 1;
    return f;
  };
  p.name = field();
  p.spec.dim = std::stoi(field());
  p.spec.offset = std::stoll(field());
  p.spec.length = std::stoll(field());
  p.spec.full = std::stoll(field());
  return p;
}

// One transfer: `length` rows along `dim` (dim < 0: the whole tensor) from
// offset `from_offset` of the sender's piece into offset `to_offset` of the
// receiver's target.
struct Move {
  std::size_t from, to;
  std::string name;
  std::size_t target;  // index among the receiver's needs
  int dim;
  std::int64_t from_offset, to_offset, length;
};

torch::Tensor part(const torch::Tensor& t, int dim, std::int64_t offset, std::int64_t length) {
  return dim < 0 ? t : t.narrow(dim, offset, length);
}

// Every member's description of what it holds: the step, then one piece per line.
std::string describe_held(const HeldState& held) {
  std::string text = std::to_string(held.step);
  if (held.step >= 0)
    for (const auto& [name, t] : held.tensors) {
      auto it = held.slices.find(name);
      text += "\n" + describe_piece(name, it == held.slices.end() ? model::ShardSpec{} : it->second);
    }
  return text;
}

// Who holds what at the newest step, by name.
struct Holding {
  std::size_t member;
  model::ShardSpec spec;
};
using Holdings = std::map<std::string, std::vector<Holding>>;

// The moves that fill member `r`'s needs from `holders`; false when some
// need is held by nobody. A holder of the whole tensor is this member
// itself if it is one, else the holders take turns, so a stage held by
// several replicas is sent by all; slices along one dimension are covered
// piece by piece.
bool plan_moves_for(std::size_t r, const std::string& needs, const Holdings& holders, std::vector<Move>& moves) {
  const auto lines = split_lines(needs);
  for (std::size_t k = 0; k < lines.size(); ++k) {
    const Piece need = parse_piece(lines[k]);
    auto it = holders.find(need.name);
    if (it == holders.end()) return false;
    const auto& hs = it->second;
    std::vector<const Holding*> whole;
    for (const auto& h : hs)
      if (h.spec.dim < 0) whole.push_back(&h);
    if (!whole.empty()) {
      const Holding* h = whole[moves.size() % whole.size()];
      for (const auto* w : whole)
        if (w->member == r) h = w;
      moves.push_back({h->member, r, need.name, k, need.spec.dim, need.spec.offset, 0, need.spec.length});
      continue;
    }
    const int dim = hs.front().spec.dim;
    if (need.spec.dim >= 0 && need.spec.dim != dim) return false;
    const std::int64_t begin = need.spec.dim >= 0 ? need.spec.offset : 0;
    const std::int64_t end = need.spec.dim >= 0 ? need.spec.offset + need.spec.length : hs.front().spec.full;
    for (std::int64_t at = begin; at < end;) {
      std::vector<const Holding*> covering;
      for (const auto& h : hs)
        if (h.spec.offset <= at && at < h.spec.offset + h.spec.length) covering.push_back(&h);
      if (covering.empty()) return false;
      const Holding* chosen = covering[moves.size() % covering.size()];
      for (const auto* c : covering)
        if (c->member == r) chosen = c;
      const std::int64_t upto = std::min(end, chosen->spec.offset + chosen->spec.length);
      moves.push_back({chosen->member, r, need.name, k, dim, at - chosen->spec.offset, at - begin, upto - at});
      at = upto;
    }
  }
  return true;
}

// The hand-over's schedule, the same on every member (it is computed from
// the same gathered lists): the newest step anyone holds and the moves that
// fill every need from its holders; nothing when some need has no holder.
std::optional<std::pair<std::int64_t, std::vector<Move>>> plan_hand_over(const std::vector<std::string>& all_held,
                                                                         const std::vector<std::string>& all_needs) {
  std::int64_t step = -1;
  std::vector<std::int64_t> held_step(all_held.size());
  std::vector<std::vector<Piece>> held_pieces(all_held.size());
  for (std::size_t r = 0; r < all_held.size(); ++r) {
    auto lines = split_lines(all_held[r]);
    held_step[r] = std::stoll(lines.front());
    for (std::size_t i = 1; i < lines.size(); ++i) held_pieces[r].push_back(parse_piece(lines[i]));
    step = std::max(step, held_step[r]);
  }
  if (step < 0) return std::nullopt;
  Holdings holders;
  for (std::size_t r = 0; r < all_held.size(); ++r)
    if (held_step[r] == step)
      for (const auto& p : held_pieces[r]) holders[p.name].push_back({r, p.spec});
  std::vector<Move> moves;
  for (std::size_t r = 0; r < all_needs.size(); ++r)
    if (!plan_moves_for(r, all_needs[r], holders, moves)) return std::nullopt;
  return std::make_pair(step, std::move(moves));
}

// This member's part of `moves`: its sends (started first), its own copies, its receives.
void run_moves(Communicator& members, const HeldState& held, const std::vector<HandOverTarget>& targets,
               const std::vector<Move>& moves) {
  torch::NoGradGuard no_grad;
  const std::size_t me = static_cast<std::size_t>(members.rank());
  std::vector<c10::intrusive_ptr<c10d::Work>> sends;
  std::vector<torch::Tensor> keep;  // what is being sent stays alive until sent
  for (std::size_t i = 0; i < moves.size(); ++i) {
    const Move& m = moves[i];
    if (m.from != me) continue;
    const auto source = part(held.tensors.at(m.name), m.dim, m.from_offset, m.length);
    if (m.to == me) {
      auto target = part(targets.at(m.target).tensor, m.dim, m.to_offset, m.length);
      if (!source.sizes().equals(target.sizes()))
        throw std::logic_error(fmt::format("hand-over of {}: held {} but the layout needs {}", m.name,
                                           fmt::join(source.sizes(), "x"), fmt::join(target.sizes(), "x")));
      target.copy_(source);
      continue;
    }
    keep.push_back(source.to(torch::kCPU, torch::kFloat32).contiguous());
    sends.push_back(members.world().send(keep.back(), static_cast<int>(m.to), static_cast<int>(i)));
  }
  for (std::size_t i = 0; i < moves.size(); ++i) {
    const Move& m = moves[i];
    if (m.to != me || m.from == me) continue;
    auto target = part(targets.at(m.target).tensor, m.dim, m.to_offset, m.length);
    auto buffer = torch::empty(target.sizes(), torch::kFloat32);
    members.world().recv(buffer, static_cast<int>(m.from), static_cast<int>(i));
    target.copy_(buffer);
  }
  for (auto& w : sends) members.world().wait(w);
}

}  // namespace

std::optional<std::int64_t> hand_over_state(Communicator& members, const HeldState& held,
                                            const std::vector<HandOverTarget>& targets) {
  std::string need_text;
  for (const auto& t : targets) need_text += (need_text.empty() ? "" : "\n") + describe_piece(t.name, t.spec);
  const auto all_held = members.all_gather_strings("held", describe_held(held));
  const auto all_needs = members.all_gather_strings("needs", need_text);
  const auto schedule = plan_hand_over(all_held, all_needs);
  if (!schedule) return std::nullopt;
  run_moves(members, held, targets, schedule->second);
  // Every member got all it needed: `members` may be destroyed on return.
  members.world().barrier();
  return schedule->first;
}

}  // namespace fleet::sailor::runtime

#include "orion/ncu_import.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>

#include "common/csv.h"
#include "common/error.h"
#include "orion/occupancy.h"

namespace fleet::orion {

namespace {

// Metrics we use, in a release-independent form.
enum class Field {
  kDuration,
  kRegisters,
  kStaticShared,
  kDynamicShared,
  kGrid,
  kBlock,
  kSmPct,
  kDramPct,
  kMemPct,
  kDramBytes,
  kDramRead,
  kDramWrite,
  kFlopsAddMul,
  kFlopsFma
};

// Raw-page metric names (several releases) and details-page display names.
const std::vector<std::pair<std::string_view, Field>>& metric_names() {
  static const std::vector<std::pair<std::string_view, Field>> names = {
      {"gpu__time_duration.sum", Field::kDuration},
      {"gpu__time_duration.avg", Field::kDuration},
      {"Duration", Field::kDuration},
      {"launch__registers_per_thread", Field::kRegisters},
      {"Registers Per Thread", Field::kRegisters},
      {"launch__shared_mem_per_block_static", Field::kStaticShared},
      {"Static Shared Memory Per Block", Field::kStaticShared},
      {"launch__shared_mem_per_block_dynamic", Field::kDynamicShared},
      {"Dynamic Shared Memory Per Block", Field::kDynamicShared},
      {"launch__grid_size", Field::kGrid},
      {"Grid Size", Field::kGrid},
      {"launch__block_size", Field::kBlock},
      {"Block Size", Field::kBlock},
      {"sm__throughput.avg.pct_of_peak_sustained_elapsed", Field::kSmPct},
      {"Compute (SM) Throughput", Field::kSmPct},
      {"Compute (SM) [%]", Field::kSmPct},
      {"SM [%]", Field::kSmPct},
      {"dram__throughput.avg.pct_of_peak_sustained_elapsed", Field::kDramPct},
      {"gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", Field::kDramPct},
      {"DRAM Throughput", Field::kDramPct},
      {"DRAM [%]", Field::kDramPct},
      {"gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", Field::kMemPct},
      {"Memory Throughput", Field::kMemPct},
      {"Memory [%]", Field::kMemPct},
      {"dram__bytes.sum", Field::kDramBytes},
      {"dram__bytes_read.sum", Field::kDramRead},
      {"dram__bytes_write.sum", Field::kDramWrite},
  };
  return names;
}

std::optional<Field> field_of(std::string_view metric) {
  for (const auto& [name, field] : metric_names()) {
    if (name == metric) return field;
  }
  // FLOP counters: smsp__sass_thread_inst_executed_op_{h,f,d}{add,mul,fma}_pred_on.sum
  constexpr std::string_view prefix = "smsp__sass_thread_inst_executed_op_";
  constexpr std::string_view suffix = "_pred_on.sum";
  if (metric.starts_with(prefix) && metric.ends_with(suffix)) {
    const std::string_view op = metric.substr(prefix.size(), metric.size() - prefix.size() - suffix.size());
    if (op == "hfma" || op == "ffma" || op == "dfma") return Field::kFlopsFma;
    if (op == "hadd" || op == "fadd" || op == "dadd" || op == "hmul" || op == "fmul" || op == "dmul") {
      return Field::kFlopsAddMul;
    }
  }
  return std::nullopt;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Multiplier to ns for time units, to bytes for sizes, 1 for counts and %.
std::optional<double> unit_scale(Field field, std::string_view unit_text) {
  const std::string unit = lower(unit_text);
  if (field == Field::kDuration) {
    if (unit == "nsecond" || unit == "ns") return 1.0;
    if (unit == "usecond" || unit == "us") return 1e3;
    if (unit == "msecond" || unit == "ms") return 1e6;
    if (unit == "second" || unit == "s") return 1e9;
    return std::nullopt;
  }
  if (field == Field::kStaticShared || field == Field::kDynamicShared || field == Field::kDramBytes ||
      field == Field::kDramRead || field == Field::kDramWrite) {
    if (unit == "byte" || unit == "b") return 1.0;
    if (unit == "kbyte" || unit == "kb") return 1e3;
    if (unit == "mbyte" || unit == "mb") return 1e6;
    if (unit == "gbyte" || unit == "gb") return 1e9;
    if (unit == "kibyte" || unit == "kib") return 1024.0;
    if (unit == "mibyte" || unit == "mib") return 1048576.0;
    return std::nullopt;
  }
  if (field == Field::kMemPct && unit != "%" && !unit.empty()) return std::nullopt;  // a bandwidth, not a share
  return 1.0;
}

// "(256, 1, 1)" -> 256; a plain number is taken as is; nullopt when
// malformed or beyond 2^53 (no real launch is that large).
std::optional<std::int64_t> dim3_product(std::string_view text) {
  constexpr double kLimit = 9007199254740992.0;
  double product = 1;
  bool any = false;
  std::string digits;
  auto flush = [&] {
    if (!digits.empty()) {
      product *= digits.size() > 16 ? kLimit * 2 : std::stod(digits);
      any = true;
      digits.clear();
    }
  };
  for (char c : text) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digits += c;
    } else if (c == ',' || c == ')' || c == ' ' || c == '(') {
      flush();
    } else {
      return std::nullopt;
    }
  }
  flush();
  if (!any || product > kLimit) return std::nullopt;
  return static_cast<std::int64_t>(product);
}

// A count read from the export, checked before it becomes an integer.
std::int64_t checked_count(double value, double limit, const char* what, const std::string& kernel,
                           const std::string& file, std::size_t line) {
  if (!std::isfinite(value) || value < 0 || value > limit || value != std::floor(value)) {
    throw InputError(
        std::string(what) + " of kernel '" + kernel + "' is not a plausible count: " + std::to_string(value),
        {file, "line " + std::to_string(line), std::nullopt});
  }
  return static_cast<std::int64_t>(value);
}

struct KernelAccumulator {
  std::string name;
  std::map<Field, double> values;
  std::string grid_text, block_text;
  std::size_t line = 0;
};

KernelRecord finish(const KernelAccumulator& k, const DeviceSpec& device, const std::string& file) {
  auto get = [&](Field f) -> std::optional<double> {
    auto it = k.values.find(f);
    return it == k.values.end() ? std::nullopt : std::optional<double>(it->second);
  };
  KernelRecord r;
  r.name = k.name;
  const auto duration = get(Field::kDuration);
  if (!duration) {
    throw InputError("kernel '" + k.name + "' has no duration metric (gpu__time_duration.sum or Duration)",
                     {file, "line " + std::to_string(k.line), std::nullopt});
  }
  r.duration_ns = *duration;
  auto count = [&](Field f, double fallback, double limit, const char* what) {
    return checked_count(get(f).value_or(fallback), limit, what, k.name, file, k.line);
  };
  r.grid_blocks = count(Field::kGrid, static_cast<double>(dim3_product(k.grid_text).value_or(0)), 9.0e15, "grid size");
  r.threads_per_block = static_cast<int>(
      count(Field::kBlock, static_cast<double>(dim3_product(k.block_text).value_or(0)), 1 << 20, "block size"));
  r.registers_per_thread = static_cast<int>(count(Field::kRegisters, 0, 1 << 16, "registers per thread"));
  r.static_shared_bytes = count(Field::kStaticShared, 0, 1 << 30, "static shared memory");
  r.dynamic_shared_bytes = count(Field::kDynamicShared, 0, 1 << 30, "dynamic shared memory");
  if (!std::isfinite(r.duration_ns) || r.duration_ns < 0) {
    throw InputError("kernel '" + k.name + "' has an invalid duration",
                     {file, "line " + std::to_string(k.line), std::nullopt});
  }
  if (r.grid_blocks > 0 && r.threads_per_block > 0) {
    LaunchConfig launch{r.grid_blocks, r.threads_per_block, r.registers_per_thread, r.static_shared_bytes,
                        r.dynamic_shared_bytes};
    try {
      r.sm_usage = compute_occupancy(launch, device).sms_needed;
    } catch (const InputError& e) {
      throw InputError("kernel '" + k.name + "': " + e.message(),
                       {file, "line " + std::to_string(k.line), std::nullopt});
    }
  }
  // Byte and instruction counts and throughput shares: finite and non-negative,
  // or the profile written from them would carry inf or a negative class input.
  auto amount = [&](Field f, const char* what) -> std::optional<double> {
    const auto v = get(f);
    if (v && !(std::isfinite(*v) && *v >= 0)) {
      throw InputError(
          std::string(what) + " of kernel '" + k.name + "' is not a plausible value: " + std::to_string(*v),
          {file, "line " + std::to_string(k.line), std::nullopt});
    }
    return v;
  };
  const auto dram = amount(Field::kDramBytes, "DRAM bytes"), dram_read = amount(Field::kDramRead, "DRAM bytes read"),
             dram_write = amount(Field::kDramWrite, "DRAM bytes written");
  const auto add_mul = amount(Field::kFlopsAddMul, "add/mul instructions"),
             fma = amount(Field::kFlopsFma, "FMA instructions");
  if (dram) {
    r.dram_bytes = *dram;
  } else if (dram_read || dram_write) {
    r.dram_bytes = dram_read.value_or(0) + dram_write.value_or(0);
  }
  if (add_mul || fma) r.flops = add_mul.value_or(0) + 2 * fma.value_or(0);
  amount(Field::kSmPct, "SM throughput");
  amount(Field::kDramPct, "DRAM throughput");
  amount(Field::kMemPct, "memory throughput");
  if (r.flops >= 0 && r.dram_bytes >= 0 && (r.flops > 0 || r.dram_bytes > 0)) {
    r.profile = classify_by_roofline(r.flops, r.dram_bytes, device);
  } else if (auto sm = get(Field::kSmPct)) {
    const auto mem = get(Field::kDramPct) ? get(Field::kDramPct) : get(Field::kMemPct);
    r.profile = mem ? classify_by_utilization(*sm, *mem) : KernelClass::kUnknown;
  }
  return r;
}

double metric_value(const CsvTable& t, std::size_t row, std::size_t column) {
  const std::string& text = t.at(row, column);
  if (text == "n/a" || text == "N/A") return std::nan("");
  return t.number(row, column);
}

void add_value(KernelAccumulator& k, Field f, double v) {
  if (std::isnan(v)) return;
  // FLOP counters of several precisions add up; everything else is unique.
  if (f == Field::kFlopsAddMul || f == Field::kFlopsFma) {
    k.values[f] += v;
  } else {
    k.values[f] = v;
  }
}

// The kernels of an export in the order they first appear, by ncu's ID.
class KernelTable {
 public:
  KernelTable(const CsvTable& t, const std::string& name)
      : t_(t), id_(t.require_column("ID")), grid_(t.column("Grid Size")), block_(t.column("Block Size")) {
    kernel_column_ = t.column("Kernel Name") ? t.column("Kernel Name") : t.column("Function Name");
    if (!kernel_column_) throw InputError("missing column 'Kernel Name'", {name, "header", std::nullopt});
  }
  std::size_t id_column() const { return id_; }
  /// "Grid Size" and "Block Size": identification, not metrics.
  bool identifies(std::size_t column) const { return column == grid_ || column == block_; }
  KernelAccumulator& of_row(std::size_t row) {
    auto [it, inserted] = by_id_.emplace(t_.at(row, id_), kernels_.size());
    if (inserted) {
      KernelAccumulator k;
      k.name = t_.at(row, *kernel_column_);
      if (grid_) k.grid_text = t_.at(row, *grid_);
      if (block_) k.block_text = t_.at(row, *block_);
      k.line = t_.line_of(row);
      kernels_.push_back(std::move(k));
    }
    return kernels_[it->second];
  }
  const std::vector<KernelAccumulator>& kernels() const { return kernels_; }

 private:
  const CsvTable& t_;
  std::size_t id_;
  std::optional<std::size_t> grid_, block_, kernel_column_;
  std::vector<KernelAccumulator> kernels_;
  std::map<std::string, std::size_t> by_id_;
};

// Details page: one metric per row.
void read_details_page(const CsvTable& t, std::size_t metric_name, KernelTable& kernels) {
  const std::size_t unit = t.require_column("Metric Unit");
  const std::size_t value = t.require_column("Metric Value");
  for (std::size_t r = 0; r < t.rows(); ++r) {
    KernelAccumulator& k = kernels.of_row(r);
    const auto field = field_of(t.at(r, metric_name));
    if (!field) continue;
    const auto scale = unit_scale(*field, t.at(r, unit));
    if (!scale) {
      if (*field == Field::kMemPct) continue;  // "Memory Throughput" in bytes/s
      t.fail(r, unit,
             t.at(r, unit).empty() ? "no unit for " + t.at(r, metric_name)
                                   : "unknown unit '" + t.at(r, unit) + "' for " + t.at(r, metric_name));
    }
    add_value(k, *field, metric_value(t, r, value) * *scale);
  }
}

// Raw page: metrics as columns; the first data row may hold units.
void read_raw_page(const CsvTable& t, const std::string& name, KernelTable& kernels) {
  const bool units_row = t.rows() > 0 && t.at(0, kernels.id_column()).empty();
  std::vector<std::pair<std::size_t, Field>> columns;
  for (std::size_t c = 0; c < t.header().size(); ++c) {
    // "Block Size"/"Grid Size" are the dim3 identification columns here, read as tuples.
    if (kernels.identifies(c)) continue;
    if (auto f = field_of(t.header()[c])) columns.emplace_back(c, *f);
  }
  for (std::size_t r = units_row ? 1 : 0; r < t.rows(); ++r) {
    KernelAccumulator& k = kernels.of_row(r);
    for (const auto& [c, field] : columns) {
      if (t.at(r, c).empty()) continue;
      const std::string unit = units_row ? t.at(0, c) : "";
      const auto scale = unit_scale(field, unit);
      if (!scale) {
        if (field == Field::kMemPct) continue;
        // Without ncu's units row a duration could be in ns, us or ms: refuse to guess.
        if (!units_row)
          throw InputError("no units row under the header, so '" + t.header()[c] +
                               "' has no unit; export with ncu's --csv --page raw, which writes one",
                           {name, "line 2", std::nullopt});
        t.fail(0, c, "unknown unit '" + unit + "'");
      }
      add_value(k, field, metric_value(t, r, c) * *scale);
    }
  }
}

}  // namespace

KernelProfile import_ncu_csv(std::string_view text, const std::string& name, const DeviceSpec& device) {
  // ncu prefixes its CSV with "==PROF==" log lines when it profiles and exports in one go.
  std::string_view body = text;
  while (body.starts_with("==")) {
    const auto nl = body.find('\n');
    body = nl == std::string_view::npos ? std::string_view() : body.substr(nl + 1);
  }
  const CsvTable t = CsvTable::parse(body, name);
  KernelTable kernels(t, name);
  if (const auto metric_name = t.column("Metric Name"))
    read_details_page(t, *metric_name, kernels);
  else
    read_raw_page(t, name, kernels);
  if (kernels.kernels().empty()) throw InputError("no kernels in the export", {name, "", std::nullopt});

  KernelProfile out;
  out.source = name;
  out.device = device.name;
  if (kernels.kernels().size() > kMaxProfileKernels)
    throw InputError("more than " + std::to_string(kMaxProfileKernels) + " kernels; a profile holds at most that many",
                     {name, "", std::nullopt});
  for (const KernelAccumulator& k : kernels.kernels()) {
    out.kernels.push_back(finish(k, device, name));
    // What the profile reader refuses is not written: an import reads back.
    if (const auto problem = kernel_record_problem(out.kernels.back()))
      throw InputError("kernel '" + k.name + "': " + *problem, {name, "line " + std::to_string(k.line), std::nullopt});
  }
  return out;
}

}  // namespace fleet::orion

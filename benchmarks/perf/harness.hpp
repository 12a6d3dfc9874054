#pragma once
// polycoll-perf: one templated harness, nccl-tests' interface and output, one
// executable per backend. A backend joins by writing a Driver (a small struct,
// see the `Driver` concept below and docs/benchmarks.md) and a main():
//
//   int main(int argc, char** argv) { return polycoll::perf::run<MyDriver>(argc, argv); }
//
// Every collective goes through the seed surface (u64 addresses, run-time
// DType/ReduceOp), which is what AnyCommunicator exposes too, so the same code
// drives Communicator<B> and AnyCommunicator.

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cmath>
#include <complex>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <polycoll/dtype.hpp>
#include <polycoll/error.hpp>
#include <polycoll/numeric.hpp>
#include <polycoll/reduce_op.hpp>

#include "baseline.hpp"

namespace polycoll::perf {

// ---------------------------------------------------------------- collectives

enum class Coll : std::uint8_t {
  all_reduce, broadcast, all_gather, reduce_scatter, sendrecv, reduce, gather, scatter, all_to_all
};

struct CollInfo {
  Coll coll;
  std::string_view name;
  bool reduces;       // has a ReduceOp
  bool rooted;        // has a root
  bool out_of_place;  // the seed surface has an out-of-place form
  bool in_place;      // ... and an in-place form
};

inline constexpr std::array<CollInfo, 9> coll_table = {{
    {Coll::all_reduce, "all_reduce", true, false, false, true},  // the seed all_reduce is in place
    {Coll::broadcast, "broadcast", false, true, false, true},    // so is broadcast
    {Coll::all_gather, "all_gather", false, false, true, true},
    {Coll::reduce_scatter, "reduce_scatter", true, false, true, true},
    {Coll::sendrecv, "sendrecv", false, false, true, false},
    {Coll::reduce, "reduce", true, true, true, true},        // in place: send == recv
    {Coll::gather, "gather", false, true, true, true},       // in place: send == recv + rank*count
    {Coll::scatter, "scatter", false, true, true, true},     // in place: recv == send + rank*count
    {Coll::all_to_all, "all_to_all", false, false, true, false},  // send and recv must not overlap
}};

inline const CollInfo& info(Coll c) { return coll_table[static_cast<std::size_t>(c)]; }

/// The collectives whose nccl-tests size is the whole buffer of all ranks'
/// blocks (count per rank x ranks): all_gather's and gather's receive buffer,
/// reduce_scatter's and scatter's send buffer, all_to_all's send (= receive) buffer.
inline constexpr bool whole_buffer(Coll c) {
  return c == Coll::all_gather || c == Coll::reduce_scatter || c == Coll::gather || c == Coll::scatter ||
         c == Coll::all_to_all;
}

/// nccl-tests' bus-bandwidth factors (doc/PERFORMANCE.md and the *GetBw
/// functions of src/*.cu there).
inline double bus_factor(Coll c, std::size_t n) {
  const double dn = static_cast<double>(n);
  switch (c) {
    case Coll::all_reduce:
      return 2.0 * (dn - 1) / dn;
    case Coll::all_gather:
    case Coll::reduce_scatter:
    case Coll::gather:
    case Coll::scatter:
    case Coll::all_to_all:
      return (dn - 1) / dn;
    case Coll::broadcast:
    case Coll::sendrecv:
    case Coll::reduce:
      return 1.0;
  }
  return 1.0;
}

/// nccl-tests' spelling of a dtype where it has one (so tools that parse its
/// tables read ours), polycoll's name otherwise.
inline std::string_view type_label(DType d) {
  constexpr std::pair<DType, std::string_view> nccl_names[] = {
      {DType::I8, "int8"},     {DType::U8, "uint8"},   {DType::I32, "int32"},      {DType::U32, "uint32"},
      {DType::I64, "int64"},   {DType::U64, "uint64"}, {DType::F16, "half"},       {DType::F32, "float"},
      {DType::F64, "double"},  {DType::BF16, "bfloat16"}, {DType::F8E4M3, "f8e4m3"}, {DType::F8E5M2, "f8e5m2"},
  };
  for (const auto& [dt, n] : nccl_names) {
    if (dt == d) return n;
  }
  return name(d);
}

// ---------------------------------------------------------------- arguments

struct Args {
  std::vector<Coll> colls;
  std::size_t min_bytes = 8;
  std::size_t max_bytes = 64u << 20;
  double factor = 4;
  std::vector<ReduceOp> ops{ReduceOp::Sum};
  std::vector<DType> dtypes{DType::F32};
  std::size_t root = 0;
  bool all_roots = false;  // -r all (or -1, as nccl-tests): every root of the rooted collectives
  int iters = 20;
  int warmup = 5;
  bool check = true;
  std::size_t ranks = 2;
  bool vs_native = false;
  bool baseline = true;
  bool ratios = false;
  int rounds = 7;
  bool inject_wrong = false;  // test only: corrupt one output element per checked point (proves -c fails)
  std::string csv, json;
  std::string command;  // argv joined, for the result files
};

inline void usage(std::FILE* f, const char* argv0) {
  std::fprintf(f,
               "usage: %s [collective|all] [options]\n"
               "  collectives: all_reduce broadcast all_gather reduce_scatter sendrecv reduce gather scatter\n"
               "               all_to_all (default: all)\n"
               "  -b SIZE      minimum size in bytes (K/M/G suffixes; default 8)\n"
               "  -e SIZE      maximum size in bytes (default 64M)\n"
               "  -f FACTOR    size multiplication factor (default 4)\n"
               "  -o OP        reduction op: sum prod min max avg, or all (default sum)\n"
               "  -d TYPE      dtype (polycoll or nccl-tests names: f32/float, bf16/bfloat16, ...), or all (default f32)\n"
               "  -r ROOT      root rank of broadcast, reduce, gather, scatter; all or -1: every rank in turn (default 0)\n"
               "  -n ITERS     timed iterations per size (default 20)\n"
               "  -w ITERS     warm-up iterations per size (default 5)\n"
               "  -c 0|1       check results against closed-form values (default 1)\n"
               "  -t RANKS     ranks of an in-process backend (threads, any; default 2)\n"
               "  --vs-native  interleave the native call (see docs/benchmarks.md) and add ntime/ratio columns\n"
               "  --no-baseline  skip the memcpy/round-trip header lines\n"
               "  --ratios     interleaved rounds of the two headline ratios (64 MiB busbw / memcpy bw,\n"
               "               8 B latency / cache-line round trip) instead of the sweep\n"
               "  --rounds N   rounds of --ratios (default 7)\n"
               "  --csv FILE   also write the results as CSV\n"
               "  --json FILE  also write the results as JSON (scripts/plot reads it)\n",
               argv0);
}

inline std::optional<std::size_t> parse_size(std::string_view s) {
  if (s.empty()) return std::nullopt;
  std::size_t mult = 1;
  switch (s.back()) {
    case 'k': case 'K': mult = 1ull << 10; s.remove_suffix(1); break;
    case 'm': case 'M': mult = 1ull << 20; s.remove_suffix(1); break;
    case 'g': case 'G': mult = 1ull << 30; s.remove_suffix(1); break;
    default: break;
  }
  if (s.empty()) return std::nullopt;
  std::size_t v = 0;
  for (char ch : s) {
    if (ch < '0' || ch > '9') return std::nullopt;
    v = v * 10 + static_cast<std::size_t>(ch - '0');
  }
  return v * mult;
}

inline std::optional<DType> parse_type(std::string_view s) {
  if (auto d = parse_dtype(s)) return d;
  for (DType d : all_dtypes) {
    if (type_label(d) == s) return d;
  }
  return std::nullopt;
}

/// Parses argv; on a bad argument prints why and the usage and returns nullopt.
inline std::optional<Args> parse_args(int argc, char** argv) {
  Args a;
  for (int i = 0; i < argc; ++i) {
    if (i) a.command += ' ';
    a.command += argv[i];
  }
  auto bad = [&](std::string_view what, std::string_view v) -> std::optional<Args> {
    std::fprintf(stderr, "%s: bad %.*s '%.*s'\n", argv[0], static_cast<int>(what.size()), what.data(),
                 static_cast<int>(v.size()), v.data());
    usage(stderr, argv[0]);
    return std::nullopt;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> std::string_view { return i + 1 < argc ? std::string_view(argv[++i]) : std::string_view(); };
    if (arg == "-h" || arg == "--help") {
      usage(stdout, argv[0]);
      std::exit(0);
    } else if (arg == "-b" || arg == "-e") {
      const auto v = value();
      const auto s = parse_size(v);
      if (!s) return bad(arg, v);
      (arg == "-b" ? a.min_bytes : a.max_bytes) = *s;
    } else if (arg == "-f") {
      const auto v = value();
      char* end = nullptr;
      const std::string copy(v);
      a.factor = std::strtod(copy.c_str(), &end);
      if (copy.empty() || *end != '\0' || !(a.factor > 1)) return bad(arg, v);
    } else if (arg == "-o") {
      const auto v = value();
      if (v == "all") {
        a.ops.assign(all_reduce_ops.begin(), all_reduce_ops.end());
      } else if (auto op = parse_reduce_op(v)) {
        a.ops = {*op};
      } else {
        return bad(arg, v);
      }
    } else if (arg == "-d") {
      const auto v = value();
      if (v == "all") {
        a.dtypes.assign(all_dtypes.begin(), all_dtypes.end());
      } else if (auto d = parse_type(v)) {
        a.dtypes = {*d};
      } else {
        return bad(arg, v);
      }
    } else if (arg == "-r" && i + 1 < argc && (std::string_view(argv[i + 1]) == "all" ||
                                              std::string_view(argv[i + 1]) == "-1")) {
      a.all_roots = true;
      ++i;
    } else if (arg == "-r" || arg == "-n" || arg == "-w" || arg == "-c" || arg == "-t" || arg == "--rounds") {
      const auto v = value();
      const auto s = parse_size(v);
      if (!s || v.find_first_of("kKmMgG") != std::string_view::npos) return bad(arg, v);
      if (arg == "-r") {
        a.root = *s;
        a.all_roots = false;
      }
      if (arg == "-n") a.iters = static_cast<int>(std::max<std::size_t>(1, *s));
      if (arg == "-w") a.warmup = static_cast<int>(*s);
      if (arg == "-c") a.check = *s != 0;
      if (arg == "-t") a.ranks = std::max<std::size_t>(1, *s);
      if (arg == "--rounds") a.rounds = static_cast<int>(std::max<std::size_t>(1, *s));
    } else if (arg == "--vs-native") {
      a.vs_native = true;
    } else if (arg == "--no-baseline") {
      a.baseline = false;
    } else if (arg == "--ratios") {
      a.ratios = true;
    } else if (arg == "--inject-wrong") {
      // Not in the usage: the test suite's proof that a wrong element fails the run.
      a.inject_wrong = true;
    } else if (arg == "--csv" || arg == "--json") {
      const auto v = value();
      if (v.empty()) return bad(arg, v);
      (arg == "--csv" ? a.csv : a.json) = std::string(v);
    } else if (arg == "all") {
      a.colls.clear();
      for (const auto& c : coll_table) a.colls.push_back(c.coll);
    } else {
      const auto it = std::find_if(coll_table.begin(), coll_table.end(), [&](const CollInfo& c) { return c.name == arg; });
      if (it == coll_table.end()) return bad("argument", arg);
      a.colls.push_back(it->coll);
    }
  }
  if (a.colls.empty()) {
    for (const auto& c : coll_table) a.colls.push_back(c.coll);
  }
  if (a.max_bytes < a.min_bytes) return bad("-e (smaller than -b)", std::to_string(a.max_bytes));
  return a;
}

// ---------------------------------------------------------------- the driver interface

/// A native call for Driver::native: the same operation as ours, on the same
/// buffers, plus `scratch`, a private buffer as large as the largest one.
struct NativeCall {
  Coll coll;
  DType dtype;
  ReduceOp op;
  std::size_t count;  // per-rank count, as passed to our call
  std::size_t root;
  std::uint64_t send, recv, scratch;
  std::size_t rank, world;
};

/// What a backend provides to join polycoll-perf.
///
/// Required:
///   using Comm = ...;                       Communicator<B> or AnyCommunicator (the seed surface is used)
///   static constexpr std::string_view name; "threads", "mpi", ...: the binary's suffix, the result label
///   int launch(const Args&, F body);        runs `int body(Comm&)` once per rank (threads, or this process's
///                                           one rank) and returns the largest value any body returned; a
///                                           failure to create the communicator is reported and returns 2
///   void* alloc(std::size_t bytes);         memory the backend communicates from (host or device), pre-touched
///   void release(void*);
///   void upload(void* dst, const void* host, std::size_t); void download(void* host, const void* src, std::size_t);
/// Optional (detected with `requires`):
///   Status native(Comm&, const NativeCall&);   the --vs-native baseline (absent: --vs-native is refused)
///   std::string_view native_name;              what native means, printed in the header
///   double max_over_ranks(Comm&, double); std::uint64_t sum_over_ranks(Comm&, std::uint64_t);
///                                              (absent: an all_reduce on host memory through Comm itself)
template <class D>
concept Driver = requires(D& d, const Args& a, void* p, const void* cp, std::size_t n) {
  typename D::Comm;
  { D::name } -> std::convertible_to<std::string_view>;
  { d.alloc(n) } -> std::same_as<void*>;
  d.release(p);
  d.upload(p, cp, n);
  d.download(p, cp, n);
};

template <class D>
concept HasNative = requires(D& d, typename D::Comm& c, const NativeCall& nc) {
  { d.native(c, nc) } -> std::same_as<Status>;
};

// ---------------------------------------------------------------- closed-form values

namespace detail {

inline std::uint64_t address(const void* p) noexcept {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
}

[[noreturn]] inline void die(std::string_view what) {
  std::fflush(stdout);
  std::fprintf(stderr, "polycoll-perf: %.*s\n", static_cast<int>(what.size()), what.data());
  std::fflush(stderr);
  std::_Exit(2);
}

inline void check(const Status& s) {
  if (!s) die(s.error().message);
}

inline std::string cat_error(std::string_view a, std::string_view b) {
  std::string s(a);
  s.append(b);
  return s;
}

template <class T>
inline constexpr bool is_complex_v = false;
template <class R>
inline constexpr bool is_complex_v<std::complex<R>> = true;

/// A small integer as a T; exact in every dtype for |v| <= 8 (f8e5m2 is the narrowest).
template <class T>
T make(std::int64_t v) {
  if constexpr (is_complex_v<T>) {
    return T(static_cast<typename T::value_type>(v), 0);
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<std::uint64_t>(v));  // modular, as the integer units wrap
  } else {
    return T(static_cast<float>(v));  // f16, bf16, f8e4m3, f8e5m2
  }
}

/// sum / n as the Avg units compute it (exact sum, one division in the working precision).
template <class T>
T make_avg(std::int64_t sum, std::size_t n) {
  if constexpr (is_complex_v<T>) {
    using R = typename T::value_type;
    return T(static_cast<R>(sum) / static_cast<R>(n), 0);
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(sum) / static_cast<T>(n);
  } else if constexpr (std::is_integral_v<T>) {
    return make<T>(sum);  // never used: avg is invalid on integers and bool
  } else {
    return T(static_cast<float>(sum) / static_cast<float>(n));
  }
}

// Inputs of the data-movement collectives: depend on (rank, index), period 7.
inline std::int64_t move_value(std::size_t r, std::size_t i) { return static_cast<std::int64_t>((r * 5 + i) % 7); }
// What rank `src` sends to rank `dst` in scatter (src = the root) and all_to_all:
// every (src, dst) pair of a few ranks shifts the period-7 pattern differently.
inline std::int64_t block_value(std::size_t src, std::size_t dst, std::size_t i) {
  return static_cast<std::int64_t>((src * 5 + dst * 3 + i) % 7);
}
// Inputs of the reductions: 0/1 (1/2 for prod), so every result is a small
// exact integer (a power of two for prod) in every dtype up to 16 ranks.
inline std::int64_t red_value(ReduceOp op, std::size_t r, std::size_t i) {
  return static_cast<std::int64_t>(op == ReduceOp::Prod ? 1 + (r + i) % 2 : (r + i) % 2);
}

/// The reduction over n ranks of red_value(op, r, i) as a T: depends only on i % 2.
template <class T>
T reduced(ReduceOp op, std::size_t n, std::size_t i) {
  std::int64_t acc = red_value(op, 0, i);
  for (std::size_t r = 1; r < n; ++r) {
    const std::int64_t v = red_value(op, r, i);
    switch (op) {
      case ReduceOp::Sum: case ReduceOp::Avg: acc += v; break;
      case ReduceOp::Prod: acc = static_cast<std::int64_t>(static_cast<std::uint64_t>(acc) * static_cast<std::uint64_t>(v)); break;
      case ReduceOp::Min: acc = std::min(acc, v); break;
      case ReduceOp::Max: acc = std::max(acc, v); break;
    }
  }
  return op == ReduceOp::Avg ? make_avg<T>(acc, n) : make<T>(acc);
}

template <class T>
bool same(const T& a, const T& b) noexcept {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

/// Still the 0x5A bytes of the pre-fill (an element no call may write).
template <class T>
bool is_sentinel(const T& v) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(&v);
  for (std::size_t k = 0; k < sizeof(T); ++k) {
    if (p[k] != 0x5A) return false;
  }
  return true;
}

}  // namespace detail

// ---------------------------------------------------------------- results

struct Measure {
  bool present = false;
  double time_us = 0, algbw = 0, busbw = 0;
  std::uint64_t wrong = 0;
  bool checked = false;
  double native_us = 0, ratio = 0;
  bool has_native = false;
};

struct Row {
  Coll coll;
  std::size_t bytes, count;  // nccl-tests' size and count: the whole buffer for all_gather/reduce_scatter
  DType dtype;
  std::optional<ReduceOp> op;
  std::optional<std::size_t> root;
  Measure oop, ip;
};

struct Baseline {
  double memcpy_gbps = 0;
  double rtt_us = 0;
  std::size_t memcpy_bytes = 64u << 20;
};

inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// time in us with nccl-tests' adaptive precision
inline std::string time_text(double us) {
  return us < 10 ? fmt("%7.2f", us) : us < 100 ? fmt("%7.1f", us) : fmt("%7.0f", us);
}

inline void print_columns(const Args& a) {
  // Each placement: time algbw busbw #wrong, plus ntime ratio with --vs-native.
  char nat_h[32] = "", nat_u[32] = "", pad[32] = "";
  if (a.vs_native) {
    std::snprintf(nat_h, sizeof nat_h, "  %7s  %6s", "ntime", "ratio");
    std::snprintf(nat_u, sizeof nat_u, "  %7s  %6s", "(us)", "");
    std::snprintf(pad, sizeof pad, "%17s", "");
  }
  std::printf("#%58s%s%s%31s%s\n", "", "out-of-place", pad, "in-place", pad);
  std::printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s%s  %7s  %6s  %6s  %6s%s\n", "size", "count", "type", "redop",
              "root", "time", "algbw", "busbw", "#wrong", nat_h, "time", "algbw", "busbw", "#wrong", nat_h);
  std::printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s%s  %7s  %6s  %6s  %6s%s\n", "(B)", "(elements)", "", "", "",
              "(us)", "(GB/s)", "(GB/s)", "", nat_u, "(us)", "(GB/s)", "(GB/s)", "", nat_u);
}

inline void print_row(const Args& a, const Row& r) {
  const std::string_view tl = type_label(r.dtype);
  const std::string_view op = r.op ? name(*r.op) : std::string_view("none");
  const long long root = r.root ? static_cast<long long>(*r.root) : -1;
  std::printf("%12zu  %12zu  %8.*s  %6.*s  %6lld", r.bytes, r.count, static_cast<int>(tl.size()), tl.data(),
              static_cast<int>(op.size()), op.data(), root);
  for (const Measure* m : {&r.oop, &r.ip}) {
    if (!m->present) {
      std::printf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
      if (a.vs_native) std::printf("  %7s  %6s", "N/A", "N/A");
      continue;
    }
    const std::string wrong = m->checked ? std::to_string(m->wrong) : std::string("N/A");
    std::printf("  %s  %6.2f  %6.2f  %6s", time_text(m->time_us).c_str(), m->algbw, m->busbw, wrong.c_str());
    if (a.vs_native) {
      if (m->has_native) {
        std::printf("  %s  %6.2f", time_text(m->native_us).c_str(), m->ratio);
      } else {
        std::printf("  %7s  %6s", "N/A", "N/A");  // no native call for this (dtype, op)
      }
    }
  }
  std::printf("\n");
  std::fflush(stdout);
}

inline void write_csv(const std::string& path, std::string_view backend, std::size_t ranks, const std::vector<Row>& rows) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) detail::die(detail::cat_error("cannot write ", path));
  std::fprintf(f, "backend,ranks,collective,size,count,type,redop,root,placement,time_us,algbw_gbps,busbw_gbps,wrong,"
                  "native_us,ratio\n");
  for (const Row& r : rows) {
    const char* place[] = {"out-of-place", "in-place"};
    const Measure* ms[] = {&r.oop, &r.ip};
    for (int k = 0; k < 2; ++k) {
      const Measure& m = *ms[k];
      if (!m.present) continue;
      const std::string_view cn = info(r.coll).name, tn = type_label(r.dtype);
      const std::string_view on = r.op ? name(*r.op) : std::string_view("none");
      std::fprintf(f, "%.*s,%zu,%.*s,%zu,%zu,%.*s,%.*s,%lld,%s,%.6g,%.6g,%.6g,%s,", static_cast<int>(backend.size()),
                   backend.data(), ranks, static_cast<int>(cn.size()), cn.data(), r.bytes, r.count,
                   static_cast<int>(tn.size()), tn.data(), static_cast<int>(on.size()), on.data(),
                   r.root ? static_cast<long long>(*r.root) : -1LL, place[k], m.time_us, m.algbw, m.busbw,
                   m.checked ? std::to_string(m.wrong).c_str() : "");
      if (m.has_native) {
        std::fprintf(f, "%.6g,%.6g\n", m.native_us, m.ratio);
      } else {
        std::fprintf(f, ",\n");
      }
    }
  }
  std::fclose(f);
}

inline std::string json_round(bool comma, double memcpy_gbps, double busbw, double rtt_us, double lat_us) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%s{\"memcpy_2thread_gbps\": %.4f, \"all_reduce_64M_busbw_gbps\": %.4f, \"cache_line_rtt_us\": %.4f, "
                "\"all_reduce_8B_us\": %.4f}",
                comma ? ", " : "", memcpy_gbps, busbw, rtt_us, lat_us);
  return buf;
}

inline std::string json_string(std::string_view s) {
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    o += ch;
  }
  o += '"';
  return o;
}

inline void write_json(const std::string& path, std::string_view backend, std::size_t ranks, const Args& a,
                       const Baseline& b,
                       const std::vector<Row>& rows, const std::string& extra = {}) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) detail::die(detail::cat_error("cannot write ", path));
  std::fprintf(f, "{\n  \"backend\": %s,\n  \"ranks\": %zu,\n  \"command\": %s,\n", json_string(backend).c_str(),
               ranks, json_string(a.command).c_str());
  std::fprintf(f, "  \"baseline\": {\"memcpy_bytes\": %zu, \"memcpy_2thread_gbps\": %.4f, \"cache_line_rtt_us\": %.4f},\n",
               b.memcpy_bytes, b.memcpy_gbps, b.rtt_us);
  if (!extra.empty()) std::fprintf(f, "%s", extra.c_str());
  std::fprintf(f, "  \"rows\": [");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::fprintf(f, "%s\n    {\"collective\": %s, \"size\": %zu, \"count\": %zu, \"type\": %s, \"redop\": %s, \"root\": %lld",
                 i ? "," : "", json_string(info(r.coll).name).c_str(), r.bytes, r.count,
                 json_string(type_label(r.dtype)).c_str(), json_string(r.op ? name(*r.op) : "none").c_str(),
                 r.root ? static_cast<long long>(*r.root) : -1LL);
    const char* keys[] = {"out_of_place", "in_place"};
    const Measure* ms[] = {&r.oop, &r.ip};
    for (int k = 0; k < 2; ++k) {
      const Measure& m = *ms[k];
      if (!m.present) {
        std::fprintf(f, ", \"%s\": null", keys[k]);
        continue;
      }
      std::fprintf(f, ", \"%s\": {\"time_us\": %.6g, \"algbw_gbps\": %.6g, \"busbw_gbps\": %.6g, \"wrong\": %s", keys[k],
                   m.time_us, m.algbw, m.busbw, m.checked ? std::to_string(m.wrong).c_str() : "null");
      if (m.has_native) std::fprintf(f, ", \"native_us\": %.6g, \"ratio\": %.6g", m.native_us, m.ratio);
      std::fprintf(f, "}");
    }
    std::fprintf(f, "}");
  }
  std::fprintf(f, "\n  ]\n}\n");
  std::fclose(f);
}

// ---------------------------------------------------------------- one rank

template <Driver D>
class Rank {
 public:
  using Comm = typename D::Comm;

  Rank(D& driver, Comm& comm, const Args& args, std::size_t max_bytes)
      : d_(driver), c_(comm), a_(args), n_(comm.world_size()), r_(comm.rank()), max_bytes_(max_bytes) {
    send_ = static_cast<std::byte*>(d_.alloc(max_bytes_));
    recv_ = static_cast<std::byte*>(d_.alloc(max_bytes_));
    if (a_.vs_native) scratch_ = static_cast<std::byte*>(d_.alloc(max_bytes_));
    host_.resize(max_bytes_);
  }
  Rank(const Rank&) = delete;
  Rank& operator=(const Rank&) = delete;
  ~Rank() {
    d_.release(send_);
    d_.release(recv_);
    if (scratch_) d_.release(scratch_);
  }

  [[nodiscard]] bool printer() const noexcept { return r_ == 0; }
  [[nodiscard]] std::size_t world() const noexcept { return n_; }

  double max_over_ranks(double v) {
    if constexpr (requires { d_.max_over_ranks(c_, v); }) {
      return d_.max_over_ranks(c_, v);
    } else {
      detail::check(c_.all_reduce(detail::address(&v), 1, DType::F64, ReduceOp::Max));
      return v;
    }
  }
  void max_over_ranks(std::vector<double>& v) {
    if constexpr (requires(double x) { d_.max_over_ranks(c_, x); }) {
      for (double& x : v) x = d_.max_over_ranks(c_, x);  // a device backend's host reduction, element-wise
    } else {
      detail::check(c_.all_reduce(detail::address(v.data()), v.size(), DType::F64, ReduceOp::Max));
    }
  }
  std::uint64_t sum_over_ranks(std::uint64_t v) {
    if constexpr (requires { d_.sum_over_ranks(c_, v); }) {
      return d_.sum_over_ranks(c_, v);
    } else {
      detail::check(c_.all_reduce(detail::address(&v), 1, DType::U64, ReduceOp::Sum));
      return v;
    }
  }
  void barrier() { detail::check(c_.barrier()); }

  /// One point (collective, dtype, op, root, size) in every placement that exists.
  std::optional<Row> measure(Coll coll, DType dtype, ReduceOp op, std::size_t root, std::size_t bytes) {
    const CollInfo& ci = info(coll);
    const std::size_t elem = size_of(dtype);
    const bool blocks = whole_buffer(coll);
    const std::size_t count = bytes / elem / (blocks ? n_ : 1);  // per rank
    if (count == 0 && bytes != 0) return std::nullopt;
    root_ = root;
    Row row{coll, count * elem * (blocks ? n_ : 1), count * (blocks ? n_ : 1), dtype, std::nullopt, std::nullopt, {}, {}};
    if (ci.reduces) row.op = op;
    if (ci.rooted) row.root = root;
    if (ci.out_of_place) row.oop = measure_one(coll, dtype, op, count, false);
    if (ci.in_place) row.ip = measure_one(coll, dtype, op, count, true);
    const double algbw_bytes = static_cast<double>(row.bytes);
    for (Measure* m : {&row.oop, &row.ip}) {
      if (!m->present) continue;
      m->algbw = m->time_us > 0 ? algbw_bytes / (m->time_us * 1e-6) / 1e9 : 0;
      m->busbw = m->algbw * bus_factor(coll, n_);
      if (m->has_native) m->ratio = m->native_us > 0 ? m->time_us / m->native_us : 0;
    }
    return row;
  }

  /// Time of `iters` back-to-back calls of `f` on this rank, mean per call, max over ranks, in seconds.
  template <class F>
  double timed(int iters, F&& f) {
    barrier();
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) detail::check(f());
    detail::check(c_.sync());
    return max_over_ranks(seconds_since(t0) / iters);
  }

  // ------------------------------------------------------------ the --ratios rounds

  struct RatioRound {
    double memcpy_gbps, allreduce_busbw, rtt_us, allreduce_8b_us;
  };

  RatioRound ratio_round(MemcpyBaseline* memcpy_base, int round) {
    RatioRound out{};
    constexpr std::size_t big = 64u << 20;
    // 1. the 2-thread memcpy bandwidth (rank 0 runs two helper threads while the others wait)
    barrier();
    if (printer()) out.memcpy_gbps = memcpy_base->bandwidth_gbps(3, 3);
    barrier();
    // 2. f32 sum all_reduce of 64 MiB: busbw
    const std::size_t count = big / sizeof(float);
    fill_reduction<float>(ReduceOp::Sum, count, recv_);
    auto ar = [&] { return c_.all_reduce(detail::address(recv_), count, DType::F32, ReduceOp::Sum); };
    if (round == 0) (void)timed(2, ar);
    std::vector<double> big_times;
    for (int b = 0; b < 3; ++b) big_times.push_back(timed(3, ar));
    out.allreduce_busbw = static_cast<double>(big) / median(big_times) / 1e9 * bus_factor(Coll::all_reduce, n_);
    // 3. the cache-line round trip
    barrier();
    if (printer()) out.rtt_us = cache_line_round_trip_us(50, 200);
    barrier();
    // 4. 8-byte all_reduce (two f32): median over blocks of the mean per call, max over ranks per block
    float small[2] = {1, 2};
    auto ar8 = [&] { return c_.all_reduce(detail::address(small), 2, DType::F32, ReduceOp::Sum); };
    for (int i = 0; i < 200; ++i) detail::check(ar8());
    std::vector<double> blocks(50);
    for (auto& t : blocks) {
      const auto t0 = Clock::now();
      for (int i = 0; i < 200; ++i) detail::check(ar8());
      t = seconds_since(t0) / 200 * 1e6;
    }
    max_over_ranks(blocks);
    out.allreduce_8b_us = median(blocks);
    return out;
  }

 private:
  Measure measure_one(Coll coll, DType dtype, ReduceOp op, std::size_t count, bool in_place) {
    Measure m;
    m.present = true;
    const std::size_t elem = size_of(dtype);
    const std::size_t peer_to = (r_ + 1) % n_, peer_from = (r_ + n_ - 1) % n_;
    const std::uint64_t send = detail::address(send_), recv = detail::address(recv_);
    // The two buffers of the call. In place as nccl-tests places them (and as
    // the seed surface recognises it): gather's send is my block of recv,
    // scatter's recv my block of send (on every rank; the root's is what makes
    // the call in place), reduce's send is recv.
    std::uint64_t in = send, out = recv;
    if (in_place) {
      const std::uint64_t mine = r_ * count * elem;
      if (coll == Coll::all_gather || coll == Coll::gather) in = recv + mine;
      if (coll == Coll::reduce_scatter || coll == Coll::scatter) out = send + mine;
      if (coll == Coll::reduce) in = recv;
    }
    auto ours = [&]() -> Status {
      switch (coll) {
        case Coll::all_reduce: return c_.all_reduce(recv, count, dtype, op);
        case Coll::broadcast: return c_.broadcast(recv, count, dtype, root_);
        case Coll::all_gather: return c_.all_gather(in, recv, count, dtype);
        case Coll::reduce_scatter: return c_.reduce_scatter(send, out, count, dtype, op);
        case Coll::sendrecv:
          if (auto s = c_.send(send, count, dtype, peer_to, 0); !s) return s;
          if (auto s = c_.recv(recv, count, dtype, peer_from, 0); !s) return s;
          return c_.sync();
        case Coll::reduce: return c_.reduce(in, out, count, dtype, op, root_);
        case Coll::gather: return c_.gather(in, out, count, dtype, root_);
        case Coll::scatter: return c_.scatter(in, out, count, dtype, root_);
        case Coll::all_to_all: return c_.all_to_all(in, out, count, dtype);
      }
      return {};
    };
    // Initialise the inputs once (nccl-tests does too): the timed calls then
    // operate on real data (in-place reductions compound, which costs the same).
    fill(coll, dtype, op, count, in_place);
    for (int i = 0; i < a_.warmup; ++i) detail::check(ours());
    if constexpr (HasNative<D>) {
      if (a_.vs_native) {
        const NativeCall nc{coll, dtype, op, count, root_, in, out, detail::address(scratch_), r_, n_};
        auto native = [&] { return d_.native(c_, nc); };
        // A native library without this (dtype, op) (MPI has no f16 or avg)
        // answers Errc::unsupported, the same on every rank: ours alone then.
        const Status first = native();
        if (first || first.error().code != Errc::unsupported) {
          detail::check(first);
          for (int i = 0; i < a_.warmup; ++i) detail::check(native());
          // Interleaved halves: ours, native, ours, native.
          const int h1 = std::max(1, a_.iters / 2), h2 = std::max(1, a_.iters - h1);
          const double o1 = timed(h1, ours), n1 = timed(h1, native);
          const double o2 = timed(h2, ours), n2 = timed(h2, native);
          m.time_us = (o1 * h1 + o2 * h2) / (h1 + h2) * 1e6;
          m.native_us = (n1 * h1 + n2 * h2) / (h1 + h2) * 1e6;
          m.has_native = true;
        }
      }
    }
    if (!m.has_native) m.time_us = timed(a_.iters, ours) * 1e6;
    if (a_.check) {
      fill(coll, dtype, op, count, in_place);
      barrier();
      detail::check(ours());
      detail::check(c_.sync());
      m.wrong = sum_over_ranks(count_wrong(coll, dtype, op, count, in_place));
      m.checked = true;
    }
    return m;
  }

  template <class T>
  void fill_reduction(ReduceOp op, std::size_t n_elems, std::byte* dst, std::size_t index0 = 0) {
    T* h = reinterpret_cast<T*>(host_.data());
    for (std::size_t i = 0; i < n_elems; ++i) h[i] = detail::make<T>(detail::red_value(op, r_, index0 + i));
    d_.upload(dst, h, n_elems * sizeof(T));
  }
  template <class T>
  void fill_movement(std::size_t rank, std::size_t n_elems, std::byte* dst) {
    T* h = reinterpret_cast<T*>(host_.data());
    for (std::size_t i = 0; i < n_elems; ++i) h[i] = detail::make<T>(detail::move_value(rank, i));
    d_.upload(dst, h, n_elems * sizeof(T));
  }
  // n_ blocks of n_elems: block q holds what rank `src` sends to rank q.
  template <class T>
  void fill_blocks(std::size_t src, std::size_t n_elems, std::byte* dst) {
    T* h = reinterpret_cast<T*>(host_.data());
    for (std::size_t q = 0; q < n_; ++q) {
      for (std::size_t i = 0; i < n_elems; ++i) h[q * n_elems + i] = detail::make<T>(detail::block_value(src, q, i));
    }
    d_.upload(dst, h, n_elems * n_ * sizeof(T));
  }
  void fill_sentinel(std::byte* dst, std::size_t bytes) {
    std::memset(host_.data(), 0x5A, bytes);
    d_.upload(dst, host_.data(), bytes);
  }

  void fill(Coll coll, DType dtype, ReduceOp op, std::size_t count, bool in_place) {
    visit_dtype(dtype, [&](auto d) {
      using T = typename decltype(d)::type;
      const std::size_t b = count * sizeof(T);
      switch (coll) {
        case Coll::all_reduce:
          fill_reduction<T>(op, count, recv_);
          break;
        case Coll::broadcast:
          if (r_ == root_) {
            fill_movement<T>(r_, count, recv_);
          } else {
            fill_sentinel(recv_, b);
          }
          break;
        case Coll::all_gather:
          fill_sentinel(recv_, b * n_);
          fill_movement<T>(r_, count, in_place ? recv_ + r_ * b : send_);
          break;
        case Coll::reduce_scatter:
          fill_reduction<T>(op, count * n_, send_);
          if (!in_place) fill_sentinel(recv_, b);
          break;
        case Coll::sendrecv:
          fill_movement<T>(r_, count, send_);
          fill_sentinel(recv_, b);
          break;
        case Coll::reduce:
          fill_reduction<T>(op, count, in_place ? recv_ : send_);
          if (!in_place) fill_sentinel(recv_, b);
          break;
        case Coll::gather:
          fill_sentinel(recv_, b * n_);
          fill_movement<T>(r_, count, in_place ? recv_ + r_ * b : send_);
          break;
        case Coll::scatter:
          // Only the root's send holds data; a backend that read another rank's gets 0x5A.
          if (r_ == root_) {
            fill_blocks<T>(root_, count, send_);
          } else {
            fill_sentinel(send_, b * n_);
          }
          if (!in_place) fill_sentinel(recv_, b);
          break;
        case Coll::all_to_all:
          fill_blocks<T>(r_, count, send_);
          fill_sentinel(recv_, b * n_);
          break;
      }
    });
  }

  std::uint64_t count_wrong(Coll coll, DType dtype, ReduceOp op, std::size_t count, bool in_place) {
    return visit_dtype(dtype, [&](auto d) -> std::uint64_t {
      using T = typename decltype(d)::type;
      const std::size_t b = count * sizeof(T);
      const T* h = reinterpret_cast<const T*>(host_.data());
      std::uint64_t wrong = 0;
      // The output back to the host; --inject-wrong then spoils one element on the last rank.
      auto fetch = [&](const std::byte* src, std::size_t bytes) {
        d_.download(host_.data(), src, bytes);
        if (a_.inject_wrong && r_ + 1 == n_ && bytes) host_[0] = ~host_[0];
      };
      switch (coll) {
        case Coll::all_reduce: {
          fetch(recv_, b);
          const T e[2] = {detail::reduced<T>(op, n_, 0), detail::reduced<T>(op, n_, 1)};
          for (std::size_t i = 0; i < count; ++i) wrong += !detail::same(h[i], e[i % 2]);
          break;
        }
        case Coll::reduce_scatter: {
          fetch(in_place ? send_ + r_ * b : recv_, b);
          const T e[2] = {detail::reduced<T>(op, n_, 0), detail::reduced<T>(op, n_, 1)};
          for (std::size_t i = 0; i < count; ++i) wrong += !detail::same(h[i], e[(r_ * count + i) % 2]);
          break;
        }
        case Coll::broadcast:
          fetch(recv_, b);
          for (std::size_t i = 0; i < count; ++i) {
            wrong += !detail::same(h[i], detail::make<T>(detail::move_value(root_, i)));
          }
          break;
        case Coll::all_gather:
          fetch(recv_, b * n_);
          for (std::size_t q = 0; q < n_; ++q) {
            for (std::size_t i = 0; i < count; ++i) {
              wrong += !detail::same(h[q * count + i], detail::make<T>(detail::move_value(q, i)));
            }
          }
          break;
        case Coll::sendrecv: {
          fetch(recv_, b);
          const std::size_t from = (r_ + n_ - 1) % n_;
          for (std::size_t i = 0; i < count; ++i) {
            wrong += !detail::same(h[i], detail::make<T>(detail::move_value(from, i)));
          }
          break;
        }
        // The rooted collectives check every rank, as nccl-tests does: the
        // root's result, and that a non-root's recv is left as it was (the
        // 0x5A pre-fill; in place, its own input).
        case Coll::reduce: {
          fetch(recv_, b);
          const T e[2] = {detail::reduced<T>(op, n_, 0), detail::reduced<T>(op, n_, 1)};
          for (std::size_t i = 0; i < count; ++i) {
            if (r_ == root_) {
              wrong += !detail::same(h[i], e[i % 2]);
            } else if (in_place) {
              wrong += !detail::same(h[i], detail::make<T>(detail::red_value(op, r_, i)));
            } else {
              wrong += !detail::is_sentinel(h[i]);
            }
          }
          break;
        }
        case Coll::gather:
          fetch(recv_, b * n_);
          for (std::size_t q = 0; q < n_; ++q) {
            for (std::size_t i = 0; i < count; ++i) {
              const T& v = h[q * count + i];
              if (r_ == root_ || (in_place && q == r_)) {
                wrong += !detail::same(v, detail::make<T>(detail::move_value(q, i)));
              } else {
                wrong += !detail::is_sentinel(v);
              }
            }
          }
          break;
        case Coll::scatter:
          fetch(in_place ? send_ + r_ * b : recv_, b);
          for (std::size_t i = 0; i < count; ++i) {
            wrong += !detail::same(h[i], detail::make<T>(detail::block_value(root_, r_, i)));
          }
          break;
        case Coll::all_to_all:
          fetch(recv_, b * n_);
          for (std::size_t q = 0; q < n_; ++q) {
            for (std::size_t i = 0; i < count; ++i) {
              wrong += !detail::same(h[q * count + i], detail::make<T>(detail::block_value(q, r_, i)));
            }
          }
          break;
      }
      return wrong;
    }, [&]() -> std::uint64_t { return count; });  // an unknown dtype: nothing is right
  }

  D& d_;
  std::size_t root_ = 0;  // of the point being measured
  Comm& c_;
  const Args& a_;
  std::size_t n_, r_;
  std::size_t max_bytes_;
  std::byte* send_ = nullptr;
  std::byte* recv_ = nullptr;
  std::byte* scratch_ = nullptr;
  std::vector<std::byte> host_;
};

// ---------------------------------------------------------------- main

inline Baseline measure_baseline(MemcpyBaseline& m) {
  Baseline b;
  b.memcpy_gbps = m.bandwidth_gbps(3, 3);
  b.rtt_us = cache_line_round_trip_us(50, 200);
  return b;
}

/// -b, -b*f, -b*f^2, ... up to -e; -e itself is the last size even when the
/// factor steps over it (so `-b 8 -e 64M -f 8` ends at 64 MiB, not 16 MiB).
inline std::vector<std::size_t> sizes(const Args& a) {
  std::vector<std::size_t> out;
  for (double s = static_cast<double>(a.min_bytes); s <= static_cast<double>(a.max_bytes) * (1 + 1e-9);
       s = std::max(s * a.factor, s + 1)) {
    out.push_back(static_cast<std::size_t>(s));
  }
  if (out.empty() || out.back() != a.max_bytes) out.push_back(a.max_bytes);
  return out;
}

template <Driver D>
int run_sweep(D& driver, typename D::Comm& comm, const Args& a) {
  const std::size_t n = comm.world_size();
  const bool any_rooted = std::any_of(a.colls.begin(), a.colls.end(), [](Coll c) { return info(c).rooted; });
  if (!a.all_roots && a.root >= n && any_rooted) {
    if (comm.rank() == 0) std::fprintf(stderr, "polycoll-perf: -r %zu: the root must be below the %zu ranks\n", a.root, n);
    return 2;
  }
  // Buffers sized for the largest point; the whole-buffer collectives' (whole_buffer()) are the size itself.
  Rank<D> rank(driver, comm, a, std::max<std::size_t>(a.max_bytes, 64));
  const bool printer = rank.printer();
  Baseline base;
  std::optional<MemcpyBaseline> memcpy_base;
  if (a.baseline || a.ratios) {
    // Rank 0 measures with two helper threads while the other ranks wait in the barrier.
    rank.barrier();
    if (printer) {
      memcpy_base.emplace(base.memcpy_bytes);
      base = measure_baseline(*memcpy_base);
    }
    rank.barrier();
  }
  if (printer) {
    std::printf("# polycoll-perf-%.*s: %s\n", static_cast<int>(D::name.size()), D::name.data(), a.command.c_str());
    if (a.ratios) {
      std::printf("# backend %.*s  ranks %zu  --ratios: %d rounds\n", static_cast<int>(D::name.size()), D::name.data(), n,
                  a.rounds);
    } else {
      std::printf("# backend %.*s  ranks %zu  minBytes %zu  maxBytes %zu  step: %g(factor)  warmup iters: %d  iters: %d  "
                  "validation: %d\n",
                  static_cast<int>(D::name.size()), D::name.data(), n, a.min_bytes, a.max_bytes, a.factor, a.warmup,
                  a.iters, a.check ? 1 : 0);
    }
    if (a.baseline || a.ratios) {
      std::printf("# baseline: 2-thread memcpy of %zu MiB each: %.2f GB/s per thread; cache-line round trip: %.3f us\n",
                  base.memcpy_bytes >> 20, base.memcpy_gbps, base.rtt_us);
    }
    if (a.vs_native) {
      if constexpr (requires { D::native_name; }) {
        std::printf("# native: %.*s\n", static_cast<int>(D::native_name.size()), D::native_name.data());
      }
    }
    std::printf("# time: mean per call of back-to-back calls, max over ranks; busbw = algbw x nccl-tests factor\n");
    std::printf("#\n");
  }

  if (a.ratios) {
    std::vector<typename Rank<D>::RatioRound> rounds;
    if (printer) {
      std::printf("# interleaved rounds, %zu ranks: f32 sum all_reduce of 64 MiB vs the 2-thread memcpy bandwidth,\n"
                  "# and 8-byte all_reduce vs the cache-line round trip (medians of 50 blocks of 200 calls)\n",
                  n);
      std::printf("# %5s  %12s  %14s  %8s  %9s  %11s  %9s\n", "round", "memcpy(GB/s)", "ar64M_busbw", "bw_ratio",
                  "rtt(us)", "ar8B(us)", "lat_ratio");
    }
    for (int k = 0; k < a.rounds; ++k) {
      auto rr = rank.ratio_round(printer ? &*memcpy_base : nullptr, k);
      if (printer) {
        rounds.push_back(rr);
        std::printf("  %5d  %12.2f  %14.2f  %8.3f  %9.3f  %11.3f  %9.3f\n", k + 1, rr.memcpy_gbps, rr.allreduce_busbw,
                    rr.allreduce_busbw / rr.memcpy_gbps, rr.rtt_us, rr.allreduce_8b_us, rr.allreduce_8b_us / rr.rtt_us);
        std::fflush(stdout);
      }
    }
    if (printer) {
      std::vector<double> bw, lat, mb, ab, rt, al;
      for (const auto& rr : rounds) {
        bw.push_back(rr.allreduce_busbw / rr.memcpy_gbps);
        lat.push_back(rr.allreduce_8b_us / rr.rtt_us);
        mb.push_back(rr.memcpy_gbps);
        ab.push_back(rr.allreduce_busbw);
        rt.push_back(rr.rtt_us);
        al.push_back(rr.allreduce_8b_us);
      }
      std::printf("  %5s  %12.2f  %14.2f  %8.3f  %9.3f  %11.3f  %9.3f\n", "median", median(mb), median(ab), median(bw),
                  median(rt), median(al), median(lat));
      std::printf("# all_reduce f32 sum 64 MiB busbw / 2-thread memcpy bandwidth: %.3f (median of per-round ratios; "
                  "target >= 0.60)\n",
                  median(bw));
      std::printf("# all_reduce 8 B median latency / cache-line round trip: %.3f (median of per-round ratios; "
                  "target <= 2)\n",
                  median(lat));
      if (!a.json.empty()) {
        std::string extra = "  \"ratios\": {\"rounds\": [";
        for (std::size_t i = 0; i < rounds.size(); ++i) {
          const auto& rr = rounds[i];
          extra += json_round(i != 0, rr.memcpy_gbps, rr.allreduce_busbw, rr.rtt_us, rr.allreduce_8b_us);
        }
        extra += fmt("], \"bw_ratio_median\": %.4f", median(bw));
        extra += fmt(", \"lat_ratio_median\": %.4f},\n", median(lat));
        write_json(a.json, D::name, n, a, base, {}, extra);
      }
    }
    return 0;
  }

  std::vector<Row> rows;
  std::uint64_t wrong_total = 0;
  double busbw_sum = 0;
  std::size_t busbw_n = 0;
  for (Coll coll : a.colls) {
    const CollInfo& ci = info(coll);
    if (printer) {
      std::printf("# Collective test starting: %.*s\n", static_cast<int>(ci.name.size()), ci.name.data());
      print_columns(a);
    }
    for (DType dt : a.dtypes) {
      const std::vector<ReduceOp> ops = ci.reduces ? a.ops : std::vector<ReduceOp>{ReduceOp::Sum};
      for (ReduceOp op : ops) {
        if (ci.reduces && !is_valid(dt, op)) continue;
        // As nccl-tests: type, op, root, then the sizes; -r all sweeps every root.
        const std::size_t root_lo = ci.rooted && a.all_roots ? 0 : a.root;
        const std::size_t root_hi = ci.rooted && a.all_roots ? n : a.root + 1;
        for (std::size_t root = root_lo; root < root_hi; ++root) {
          for (std::size_t s : sizes(a)) {
            auto row = rank.measure(coll, dt, op, root, s);
            if (!row) continue;
            for (const Measure* m : {&row->oop, &row->ip}) {
              if (!m->present) continue;
              wrong_total += m->wrong;
              busbw_sum += m->busbw;
              ++busbw_n;
            }
            if (printer) {
              print_row(a, *row);
              rows.push_back(*row);
            }
          }
        }
        if (!ci.reduces) break;
      }
    }
  }
  if (printer) {
    std::printf("# Out of bounds values : %" PRIu64 " %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %g\n", busbw_n ? busbw_sum / static_cast<double>(busbw_n) : 0.0);
    std::printf("#\n");
    if (!a.csv.empty()) write_csv(a.csv, D::name, n, rows);
    if (!a.json.empty()) write_json(a.json, D::name, n, a, base, rows);
  }
  return wrong_total ? 1 : 0;
}

/// The whole program: parse, launch the ranks, run. Exit status: 0 success,
/// 1 some element was wrong (-c 1), 2 usage or a failed call.
template <Driver D>
int run(int argc, char** argv) {
  auto args = parse_args(argc, argv);
  if (!args) return 2;
  if (args->vs_native && !HasNative<D>) {
    std::fprintf(stderr, "%s: --vs-native: the %.*s driver has no native baseline\n", argv[0],
                 static_cast<int>(D::name.size()), D::name.data());
    return 2;
  }
  D driver(argc, argv);  // may take argv by reference (MPI_Init)
  return driver.launch(*args, [&](typename D::Comm& comm) { return run_sweep(driver, comm, *args); });
}

}  // namespace polycoll::perf

// polycoll-perf-nccl: the harness on the Nccl backend, one rank per GPU of
// this process (Nccl::init_all), each driven by its own thread:
//   polycoll-perf-nccl all_reduce -b 8 -e 256M -f 4 --vs-native
// uses every visible GPU; -t N uses the first N. --vs-native interleaves the
// raw ncclAllReduce / ncclBroadcast / ncclAllGather / ncclReduceScatter /
// grouped ncclSend+ncclRecv / ncclReduce / ncclGather / ncclScatter /
// ncclAlltoAll on the communicator's own ncclComm_t, stream and buffers, so
// the ratio column is polycoll's overhead over NCCL.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <numeric>
#include <string_view>
#include <thread>
#include <vector>

#include <polycoll/backends/nccl.hpp>
#include <polycoll/backends/nccl/device.hpp>  // settle, to wait for the native NCCL calls
#include <polycoll/backends/nccl/error.hpp>   // nccl_text

#include "harness.hpp"

namespace polycoll::perf {

struct NcclDriver {
  using Comm = Nccl;
  static constexpr std::string_view name = "nccl";
  static constexpr std::string_view native_name =
      "ncclAllReduce / ncclBroadcast / ncclAllGather / ncclReduceScatter / ncclGroupStart+ncclSend+ncclRecv+"
      "ncclGroupEnd+cudaStreamSynchronize / ncclReduce / ncclGather / ncclScatter / ncclAlltoAll on the "
      "communicator's ncclComm_t, stream and buffers (no native reduction for complex, bool, i16/u16)";

  NcclDriver(int&, char**&) {}

  template <class Body>
  int launch(const Args& a, Body body) {
    int gpus = 0;
    if (const cudaError_t e = cudaGetDeviceCount(&gpus); e != cudaSuccess || gpus == 0) {
      std::fprintf(stderr, "polycoll-perf-nccl: no CUDA device (%s)\n",
                   e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
      return 2;
    }
    // -t N picks the first N GPUs; without it, every visible GPU (like nccl-tests -g).
    const bool explicit_ranks = a.command.find(" -t ") != std::string::npos;
    const std::size_t world = explicit_ranks ? a.ranks : static_cast<std::size_t>(gpus);
    if (world > static_cast<std::size_t>(gpus)) {
      std::fprintf(stderr, "polycoll-perf-nccl: -t %zu but only %d GPU(s) are visible (one rank per GPU)\n", world,
                   gpus);
      return 2;
    }
    std::vector<int> devices(world);
    std::iota(devices.begin(), devices.end(), 0);
    auto comms = Nccl::init_all(devices);
    if (!comms) {
      std::fprintf(stderr, "polycoll-perf-nccl: %s\n", comms.error().message.c_str());
      return 2;
    }
    std::vector<int> rc(world, 0);
    {
      std::vector<std::jthread> threads;
      for (std::size_t r = 0; r < world; ++r) {
        threads.emplace_back([&, r] {
          (void)cudaSetDevice((*comms)[r].device());  // alloc() and the native calls use the rank's device
          rc[r] = body((*comms)[r]);
        });
      }
    }
    return *std::max_element(rc.begin(), rc.end());
  }

  // Device memory of the calling rank's device (its thread has it current), zeroed.
  void* alloc(std::size_t bytes) {
    void* p = nullptr;
    if (const cudaError_t e = cudaMalloc(&p, std::max<std::size_t>(bytes, 1)); e != cudaSuccess) {
      std::fprintf(stderr, "polycoll-perf-nccl: cudaMalloc(%zu): %s\n", bytes, cudaGetErrorString(e));
      std::exit(2);
    }
    (void)cudaMemset(p, 0, std::max<std::size_t>(bytes, 1));
    (void)cudaStreamSynchronize(cudaStreamLegacy);
    return p;
  }
  void release(void* p) { (void)cudaFree(p); }
  // cudaMemcpy from pageable memory may return before the DMA lands: wait for it,
  // since the communication stream does not synchronise with the legacy stream.
  void upload(void* dst, const void* host, std::size_t bytes) {
    if (bytes == 0) return;
    (void)cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice);
    (void)cudaStreamSynchronize(cudaStreamLegacy);
  }
  void download(void* host, const void* src, std::size_t bytes) {
    if (bytes) (void)cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost);
  }

  // The harness's reductions of timings and error counts: one element through
  // the communicator itself, on device memory.
  double max_over_ranks(Comm& c, double v) { return reduce_one(c, v, DType::F64, ReduceOp::Max); }
  std::uint64_t sum_over_ranks(Comm& c, std::uint64_t v) { return reduce_one(c, v, DType::U64, ReduceOp::Sum); }

  Status native(Comm& comm, const NativeCall& c) {
    ncclComm_t nc = comm.native();
    cudaStream_t s = comm.stream();
    if (nc == nullptr) return fail(Errc::aborted, "native: the communicator was aborted");
    const std::size_t elem = size_of(c.dtype);
    const bool reduces = info(c.coll).reduces;
    // Data movement is typeless: bytes. Reductions need NCCL's own type and op.
    ncclDataType_t type = ncclUint8;
    std::size_t count = c.count * elem;
    ncclRedOp_t op = ncclSum;
    if (reduces) {
      const auto t = nccl_type(c.dtype);
      const auto o = nccl_op(c.op);
      if (!t || !o) return fail(Errc::unsupported, "no native NCCL reduction for this (dtype, op)");
      type = *t;
      op = *o;
      count = c.count;
    }
    void* send = ptr(c.send);
    void* recv = ptr(c.recv);
    ncclResult_t r = ncclSuccess;
    switch (c.coll) {
      case Coll::all_reduce:
        r = ncclAllReduce(recv, recv, count, type, op, nc, s);
        break;
      case Coll::broadcast:
        r = ncclBroadcast(recv, recv, count, type, static_cast<int>(c.root), nc, s);
        break;
      case Coll::all_gather:
        r = ncclAllGather(send, recv, count, type, nc, s);
        break;
      case Coll::reduce_scatter:
        r = ncclReduceScatter(send, recv, count, type, op, nc, s);
        break;
      case Coll::sendrecv: {
        // Ours is send + recv + sync per iteration: the same here.
        const int to = static_cast<int>((c.rank + 1) % c.world), from = static_cast<int>((c.rank + c.world - 1) % c.world);
        r = ncclGroupStart();
        if (r == ncclSuccess) r = ncclSend(send, count, type, to, nc, s);
        if (r == ncclSuccess || r == ncclInProgress) r = ncclRecv(recv, count, type, from, nc, s);
        const ncclResult_t end = ncclGroupEnd();
        if (r == ncclSuccess || r == ncclInProgress) r = end;
        if (r == ncclInProgress) r = polycoll::detail::nccl::settle(nc, std::nullopt).result;
        if (r == ncclSuccess && cudaStreamSynchronize(s) != cudaSuccess) {
          return fail(Errc::backend_failure, "native: cudaStreamSynchronize failed");
        }
        break;
      }
      // The seed surface's in-place forms are NCCL's (send == recv for reduce,
      // send == recv + root*count for gather, recv == send + root*count for
      // scatter), so the same addresses go through unchanged.
      case Coll::reduce:
        r = ncclReduce(send, recv, count, type, op, static_cast<int>(c.root), nc, s);
        break;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
      case Coll::gather:
        r = ncclGather(send, recv, count, type, static_cast<int>(c.root), nc, s);
        break;
      case Coll::scatter:
        r = ncclScatter(send, recv, count, type, static_cast<int>(c.root), nc, s);
        break;
      case Coll::all_to_all:
        r = ncclAlltoAll(send, recv, count, type, nc, s);
        break;
#else
      case Coll::gather:
      case Coll::scatter:
      case Coll::all_to_all:
        return fail(Errc::unsupported, "native: ncclGather/ncclScatter/ncclAlltoAll need NCCL >= 2.28");
#endif
    }
    // The communicator is non-blocking: a launch may still be in progress.
    if (r == ncclInProgress) r = polycoll::detail::nccl::settle(nc, std::nullopt).result;
    if (r != ncclSuccess) return fail(Errc::backend_failure, polycoll::detail::nccl::nccl_text(r, "native NCCL call", nc), r);
    return {};
  }

 private:
  static void* ptr(std::uint64_t a) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(a)); }

  template <class T>
  T reduce_one(Comm& c, T v, DType d, ReduceOp op) {
    T* dev = nullptr;
    if (cudaMalloc(&dev, sizeof(T)) != cudaSuccess) detail::die("polycoll-perf-nccl: cudaMalloc of a scalar failed");
    upload(dev, &v, sizeof(T));
    detail::check(c.all_reduce(polycoll::detail::to_address(dev), 1, d, op));
    detail::check(c.sync());
    download(&v, dev, sizeof(T));
    (void)cudaFree(dev);
    return v;
  }

  static std::optional<ncclDataType_t> nccl_type(DType d) {
    const std::pair<DType, ncclDataType_t> table[] = {
        {DType::F64, ncclFloat64},      {DType::F32, ncclFloat32},      {DType::F16, ncclFloat16},
        {DType::BF16, ncclBfloat16},    {DType::F8E4M3, ncclFloat8e4m3}, {DType::F8E5M2, ncclFloat8e5m2},
        {DType::I64, ncclInt64},        {DType::I32, ncclInt32},        {DType::I8, ncclInt8},
        {DType::U64, ncclUint64},       {DType::U32, ncclUint32},       {DType::U8, ncclUint8},
    };
    for (const auto& [k, v] : table) {
      if (k == d) return v;
    }
    return std::nullopt;
  }
  static std::optional<ncclRedOp_t> nccl_op(ReduceOp op) {
    switch (op) {
      case ReduceOp::Sum: return ncclSum;
      case ReduceOp::Prod: return ncclProd;
      case ReduceOp::Min: return ncclMin;
      case ReduceOp::Max: return ncclMax;
      case ReduceOp::Avg: return ncclAvg;
    }
    return std::nullopt;
  }
};

}  // namespace polycoll::perf

int main(int argc, char** argv) { return polycoll::perf::run<polycoll::perf::NcclDriver>(argc, argv); }

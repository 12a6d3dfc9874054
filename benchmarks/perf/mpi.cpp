// polycoll-perf-mpi: the harness on the Mpi backend, one rank per process:
//   mpiexec.mpich -n 2 polycoll-perf-mpi all -b 8 -e 64M -f 8 --vs-native
// --vs-native interleaves the raw MPI call on the same MPI_Comm and buffers.
#include <mpi.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include <polycoll/backends/mpi.hpp>

#include "baseline.hpp"
#include "harness.hpp"

namespace polycoll::perf {

struct MpiDriver {
  using Comm = Mpi;
  static constexpr std::string_view name = "mpi";
  static constexpr std::string_view native_name =
      "MPI_Allreduce(MPI_IN_PLACE) / MPI_Bcast / MPI_Allgather / MPI_Reduce_scatter_block / MPI_Sendrecv / "
      "MPI_Reduce / MPI_Gather / MPI_Scatter / MPI_Alltoall (MPI_IN_PLACE for in-place) on the communicator's own "
      "MPI_Comm and the same buffers (f16, bf16, fp8 and avg have no native reduction)";

  MpiDriver(int& argc, char**& argv) : env_(argc, argv) {}

  template <class Body>
  int launch(const Args&, Body body) {
    auto comm = Mpi::world();
    if (!comm) {
      std::fprintf(stderr, "polycoll-perf-mpi: %s\n", comm.error().message.c_str());
      return 2;
    }
    int rc = body(*comm);
    int worst = rc;
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, comm->native());
    return worst;
  }

  void* alloc(std::size_t bytes) {
    buffers_.push_back(std::make_unique<HostBuffer>(bytes));
    return buffers_.back()->data();
  }
  void release(void* p) {
    std::erase_if(buffers_, [p](const std::unique_ptr<HostBuffer>& b) { return b->data() == p; });
  }
  void upload(void* dst, const void* host, std::size_t bytes) {
    if (bytes) std::memcpy(dst, host, bytes);
  }
  void download(void* host, const void* src, std::size_t bytes) {
    if (bytes) std::memcpy(host, src, bytes);
  }

  Status native(Comm& comm, const NativeCall& c) {
    MPI_Comm mc = comm.native();
    const std::size_t elem = size_of(c.dtype);
    const bool reduces = info(c.coll).reduces;
    // Data movement is typeless: bytes. Reductions need MPI's own type and op.
    MPI_Datatype type = MPI_BYTE;
    int count = static_cast<int>(c.count * elem);
    MPI_Op op = MPI_SUM;
    if (reduces) {
      const auto t = mpi_type(c.dtype);
      const auto o = mpi_op(c.dtype, c.op);
      if (!t || !o) return fail(Errc::unsupported, "no native MPI reduction for this (dtype, op)");
      type = *t;
      op = *o;
      count = static_cast<int>(c.count);
    }
    void* send = address_to_ptr(c.send);
    void* recv = address_to_ptr(c.recv);
    const std::size_t b = c.count * elem;
    const int root = static_cast<int>(c.root);
    int rc = MPI_SUCCESS;
    switch (c.coll) {
      case Coll::all_reduce:
        rc = MPI_Allreduce(MPI_IN_PLACE, recv, count, type, op, mc);
        break;
      case Coll::broadcast:
        rc = MPI_Bcast(recv, count, type, static_cast<int>(c.root), mc);
        break;
      case Coll::all_gather:
        if (c.send == c.recv + c.rank * b) {
          rc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, count, type, mc);
        } else {
          rc = MPI_Allgather(send, count, type, recv, count, type, mc);
        }
        break;
      case Coll::reduce_scatter:
        if (c.recv == c.send + c.rank * b) {
          rc = MPI_Reduce_scatter_block(MPI_IN_PLACE, send, count, type, op, mc);  // result at send[0, count)
        } else {
          rc = MPI_Reduce_scatter_block(send, recv, count, type, op, mc);
        }
        break;
      case Coll::sendrecv: {
        const int to = static_cast<int>((c.rank + 1) % c.world), from = static_cast<int>((c.rank + c.world - 1) % c.world);
        rc = MPI_Sendrecv(send, count, type, to, 0, recv, count, type, from, 0, mc, MPI_STATUS_IGNORE);
        break;
      }
      // Rooted: MPI_IN_PLACE on the root only, where the seed surface's in-place
      // form is; the root-only buffer is null elsewhere, as the front end passes it.
      case Coll::reduce: {
        const bool at_root = c.rank == c.root;
        const bool in_place = at_root && c.send == c.recv;
        rc = MPI_Reduce(in_place ? MPI_IN_PLACE : send, at_root ? recv : nullptr, count, type, op, root, mc);
        break;
      }
      case Coll::gather: {
        const bool at_root = c.rank == c.root;
        const bool in_place = at_root && c.send == c.recv + c.root * b;
        rc = MPI_Gather(in_place ? MPI_IN_PLACE : send, count, type, at_root ? recv : nullptr, count, type, root, mc);
        break;
      }
      case Coll::scatter: {
        const bool at_root = c.rank == c.root;
        const bool in_place = at_root && c.recv == c.send + c.root * b;
        rc = MPI_Scatter(at_root ? send : nullptr, count, type, in_place ? MPI_IN_PLACE : recv, count, type, root, mc);
        break;
      }
      case Coll::all_to_all:
        rc = MPI_Alltoall(send, count, type, recv, count, type, mc);
        break;
    }
    if (rc != MPI_SUCCESS) return fail(Errc::backend_failure, "native MPI call failed", rc);
    return {};
  }

 private:
  static void* address_to_ptr(std::uint64_t a) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(a)); }

  static std::optional<MPI_Datatype> mpi_type(DType d) {
    const std::pair<DType, MPI_Datatype> table[] = {
        {DType::F64, MPI_DOUBLE},         {DType::F32, MPI_FLOAT},           {DType::I64, MPI_INT64_T},
        {DType::I32, MPI_INT32_T},        {DType::I16, MPI_INT16_T},         {DType::I8, MPI_INT8_T},
        {DType::U64, MPI_UINT64_T},       {DType::U32, MPI_UINT32_T},        {DType::U16, MPI_UINT16_T},
        {DType::U8, MPI_UINT8_T},         {DType::Bool, MPI_C_BOOL},         {DType::C64, MPI_C_FLOAT_COMPLEX},
        {DType::C128, MPI_C_DOUBLE_COMPLEX},
    };
    for (const auto& [k, v] : table) {
      if (k == d) return v;
    }
    return std::nullopt;
  }
  static std::optional<MPI_Op> mpi_op(DType d, ReduceOp op) {
    if (d == DType::Bool) return op == ReduceOp::Sum || op == ReduceOp::Max ? MPI_LOR : MPI_LAND;
    switch (op) {
      case ReduceOp::Sum: return MPI_SUM;
      case ReduceOp::Prod: return MPI_PROD;
      case ReduceOp::Min: return MPI_MIN;
      case ReduceOp::Max: return MPI_MAX;
      case ReduceOp::Avg: return std::nullopt;
    }
    return std::nullopt;
  }

  mpi::Environment env_;
  std::vector<std::unique_ptr<HostBuffer>> buffers_;
};

}  // namespace polycoll::perf

int main(int argc, char** argv) { return polycoll::perf::run<polycoll::perf::MpiDriver>(argc, argv); }

// Device buffers handed to MPI (doc/mpi.md, "Device buffers"), for tests/mpi/device_buffers.sh:
// point to point (ring MPI_Sendrecv, MPI_Isend/MPI_Irecv with MPI_Waitall, MPI_Sendrecv_replace, a
// strided datatype whose gaps must survive, persistent requests started twice), device and host
// buffers mixed on the two ends, collectives (MPI_Allreduce, in place too, MPI_Bcast,
// MPI_Allgather, MPI_Alltoall, MPI_Reduce, MPI_Gather, MPI_Scatter, MPI_Reduce_scatter_block,
// MPI_Scan, MPI_Iallreduce, MPI_Ibcast, MPI_Igather, MPI_Iscatter, MPI_Iscan), MPI_Mrecv,
// MPI_Reduce_local, MPI_Pack/MPI_Unpack, and a freed device buffer (an MPI error, no crash).  Every check compares what a device buffer holds afterwards (read with
// cudaMemcpy) with what the ranks' values make it.  Prints "rank R: all ok" or FAIL lines.
#include <mpi.h>

#include "device_ints.h"

namespace {

// The ring with MPI_Sendrecv: each rank sends to the right and receives from the left.
void ring(size_t n) {
  const int right = (g_rank + 1) % g_size, left = (g_rank + g_size - 1) % g_size;
  int* s = device_ints(values(g_rank, n, 1));
  int* r = device_ints(std::vector<int>(n, -1));
  MPI_Sendrecv(s, static_cast<int>(n), MPI_INT, right, 7, r, static_cast<int>(n), MPI_INT, left, 7, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  expect(host_of(r, n) == values(left, n, 1), "ring MPI_Sendrecv of device buffers");
  CHECK(cudaFree(s));
  CHECK(cudaFree(r));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  const int right = (g_rank + 1) % g_size, left = (g_rank + g_size - 1) % g_size;
  ring(1000);
  ring(1 << 18);  // 1 MiB

  // Isend/Irecv both ways round the ring, completed by one MPI_Waitall.
  {
    const size_t n = 4096;
    int* to_right = device_ints(values(g_rank, n, 2));
    int* to_left = device_ints(values(g_rank, n, 3));
    int* from_left = device_ints(std::vector<int>(n, -1));
    int* from_right = device_ints(std::vector<int>(n, -1));
    MPI_Request req[4];
    MPI_Irecv(from_left, static_cast<int>(n), MPI_INT, left, 1, MPI_COMM_WORLD, &req[0]);
    MPI_Irecv(from_right, static_cast<int>(n), MPI_INT, right, 2, MPI_COMM_WORLD, &req[1]);
    MPI_Isend(to_right, static_cast<int>(n), MPI_INT, right, 1, MPI_COMM_WORLD, &req[2]);
    MPI_Isend(to_left, static_cast<int>(n), MPI_INT, left, 2, MPI_COMM_WORLD, &req[3]);
    MPI_Waitall(4, req, MPI_STATUSES_IGNORE);
    expect(host_of(from_left, n) == values(left, n, 2) && host_of(from_right, n) == values(right, n, 3),
           "MPI_Isend/MPI_Irecv of device buffers with MPI_Waitall");
    // One more each way, completed by MPI_Wait and by an MPI_Test loop.
    MPI_Irecv(from_left, static_cast<int>(n), MPI_INT, left, 3, MPI_COMM_WORLD, &req[0]);
    MPI_Isend(to_left, static_cast<int>(n), MPI_INT, right, 3, MPI_COMM_WORLD, &req[1]);
    MPI_Wait(&req[1], MPI_STATUS_IGNORE);
    for (int flag = 0; flag == 0;) MPI_Test(&req[0], &flag, MPI_STATUS_IGNORE);
    expect(host_of(from_left, n) == values(left, n, 3), "MPI_Irecv of a device buffer completed by MPI_Test");
    for (int* p : {to_right, to_left, from_left, from_right}) CHECK(cudaFree(p));
  }

  // A device buffer sent to a host buffer and a host buffer to a device one (odd and even ranks
  // swap roles), then MPI_Sendrecv_replace on a device buffer.
  {
    const size_t n = 333;
    std::vector<int> host_in(n, -1), host_out = values(g_rank, n, 4);
    int* dev = device_ints(values(g_rank, n, 5));
    int* dev_in = device_ints(std::vector<int>(n, -1));
    MPI_Sendrecv(g_rank % 2 == 0 ? static_cast<void*>(dev) : host_out.data(), static_cast<int>(n), MPI_INT, right, 4,
                 g_rank % 2 == 0 ? host_in.data() : static_cast<void*>(dev_in), static_cast<int>(n), MPI_INT, left, 4,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    const std::vector<int> want = values(left, n, left % 2 == 0 ? 5 : 4);
    expect((g_rank % 2 == 0 ? host_in : host_of(dev_in, n)) == want, "device and host buffers mixed");
    MPI_Sendrecv_replace(dev, static_cast<int>(n), MPI_INT, right, 5, left, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    expect(host_of(dev, n) == values(left, n, 5), "MPI_Sendrecv_replace of a device buffer");
    CHECK(cudaFree(dev));
    CHECK(cudaFree(dev_in));
  }

  // A strided datatype (every other int of 8): the receive writes only its elements.
  {
    MPI_Datatype every_other;
    MPI_Type_vector(8, 1, 2, MPI_INT, &every_other);
    MPI_Type_commit(&every_other);
    int* s = device_ints(values(g_rank, 16, 6));
    int* r = device_ints(std::vector<int>(16, -7));
    MPI_Sendrecv(s, 1, every_other, right, 6, r, 1, every_other, left, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    const std::vector<int> got = host_of(r, 15), src = values(left, 16, 6);
    bool ok = true;
    for (int i = 0; i < 15; ++i) ok = ok && got[static_cast<size_t>(i)] == (i % 2 == 0 ? src[static_cast<size_t>(i)] : -7);
    expect(ok, "a strided datatype on device buffers (the gaps left as they were)");
    MPI_Type_free(&every_other);
    CHECK(cudaFree(s));
    CHECK(cudaFree(r));
  }

  // Collectives.
  {
    const size_t n = 1024;
    const int size = g_size;
    int* mine = device_ints(values(g_rank, n, 8));
    int* sum = device_ints(std::vector<int>(n, -1));
    MPI_Allreduce(mine, sum, static_cast<int>(n), MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    std::vector<int> want(n, 0);
    for (int r = 0; r < size; ++r) {
      const auto v = values(r, n, 8);
      for (size_t i = 0; i < n; ++i) want[i] += v[i];
    }
    expect(host_of(sum, n) == want, "MPI_Allreduce of device buffers");
    MPI_Allreduce(MPI_IN_PLACE, mine, static_cast<int>(n), MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    expect(host_of(mine, n) == want, "MPI_Allreduce in place on a device buffer");

    int* b = device_ints(g_rank == 2 % size ? values(2 % size, n, 9) : std::vector<int>(n, -1));
    MPI_Bcast(b, static_cast<int>(n), MPI_INT, 2 % size, MPI_COMM_WORLD);
    expect(host_of(b, n) == values(2 % size, n, 9), "MPI_Bcast of a device buffer");

    const size_t k = 64;
    int* part = device_ints(values(g_rank, k, 10));
    int* all = device_ints(std::vector<int>(k * static_cast<size_t>(size), -1));
    MPI_Allgather(part, static_cast<int>(k), MPI_INT, all, static_cast<int>(k), MPI_INT, MPI_COMM_WORLD);
    std::vector<int> gathered;
    for (int r = 0; r < size; ++r) {
      const auto v = values(r, k, 10);
      gathered.insert(gathered.end(), v.begin(), v.end());
    }
    expect(host_of(all, k * static_cast<size_t>(size)) == gathered, "MPI_Allgather of device buffers");

    // Alltoall: block j of rank r holds r * 100000 + 11000 + j * k + i.
    int* to_all = device_ints(values(g_rank, k * static_cast<size_t>(size), 11));
    int* from_all = device_ints(std::vector<int>(k * static_cast<size_t>(size), -1));
    MPI_Alltoall(to_all, static_cast<int>(k), MPI_INT, from_all, static_cast<int>(k), MPI_INT, MPI_COMM_WORLD);
    const std::vector<int> a2a = host_of(from_all, k * static_cast<size_t>(size));
    bool ok = true;
    for (int r = 0; r < size; ++r) {
      const auto v = values(r, k * static_cast<size_t>(size), 11);
      for (size_t i = 0; i < k; ++i)
        ok = ok && a2a[static_cast<size_t>(r) * k + i] == v[static_cast<size_t>(g_rank) * k + i];
    }
    expect(ok, "MPI_Alltoall of device buffers");

    int* root_sum = device_ints(std::vector<int>(n, -1));
    int* again = device_ints(values(g_rank, n, 8));
    MPI_Reduce(again, g_rank == 0 ? root_sum : nullptr, static_cast<int>(n), MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (g_rank == 0) expect(host_of(root_sum, n) == want, "MPI_Reduce to a device buffer at the root");

    MPI_Gather(part, static_cast<int>(k), MPI_INT, g_rank == 0 ? all : nullptr, static_cast<int>(k), MPI_INT, 0,
               MPI_COMM_WORLD);
    if (g_rank == 0) expect(host_of(all, k * static_cast<size_t>(size)) == gathered, "MPI_Gather to a device buffer");
    int* piece = device_ints(std::vector<int>(k, -1));
    MPI_Scatter(g_rank == 0 ? all : nullptr, static_cast<int>(k), MPI_INT, piece, static_cast<int>(k), MPI_INT, 0,
                MPI_COMM_WORLD);
    expect(host_of(piece, k) == values(g_rank, k, 10), "MPI_Scatter from a device buffer");

    int* rs = device_ints(std::vector<int>(k, -1));
    MPI_Reduce_scatter_block(to_all, rs, static_cast<int>(k), MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    ok = true;
    const std::vector<int> rs_got = host_of(rs, k);
    for (size_t i = 0; i < k; ++i) {
      int w = 0;
      for (int r = 0; r < size; ++r) w += values(r, k * static_cast<size_t>(size), 11)[static_cast<size_t>(g_rank) * k + i];
      ok = ok && rs_got[i] == w;
    }
    expect(ok, "MPI_Reduce_scatter_block of device buffers");

    int* prefix = device_ints(std::vector<int>(k, -1));
    MPI_Scan(part, prefix, static_cast<int>(k), MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    ok = true;
    const std::vector<int> scan_got = host_of(prefix, k);
    for (size_t i = 0; i < k; ++i) {
      int w = 0;
      for (int r = 0; r <= g_rank; ++r) w += values(r, k, 10)[i];
      ok = ok && scan_got[i] == w;
    }
    expect(ok, "MPI_Scan of device buffers");
    for (int* p : {mine, sum, b, part, all, to_all, from_all, root_sum, again, piece, rs, prefix}) CHECK(cudaFree(p));
  }

  // Persistent requests round the ring, started twice with new values in between; then freed.
  {
    const size_t n = 2048;
    int* s = device_ints(values(g_rank, n, 12));
    int* r = device_ints(std::vector<int>(n, -1));
    MPI_Request req[2];
    MPI_Recv_init(r, static_cast<int>(n), MPI_INT, left, 12, MPI_COMM_WORLD, &req[0]);
    MPI_Send_init(s, static_cast<int>(n), MPI_INT, right, 12, MPI_COMM_WORLD, &req[1]);
    bool ok = true;
    for (int round = 0; round < 2; ++round) {
      CHECK(cudaMemcpy(s, values(g_rank, n, 12 + round).data(), n * sizeof(int), cudaMemcpyHostToDevice));
      MPI_Startall(2, req);
      MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
      ok = ok && host_of(r, n) == values(left, n, 12 + round);
    }
    expect(ok, "persistent requests on device buffers, started twice");
    MPI_Request_free(&req[0]);
    MPI_Request_free(&req[1]);
    CHECK(cudaFree(s));
    CHECK(cudaFree(r));
  }

  // Non-blocking collectives.
  {
    const size_t n = 512;
    int* mine = device_ints(values(g_rank, n, 13));
    int* sum = device_ints(std::vector<int>(n, -1));
    int* b = device_ints(g_rank == 0 ? values(0, n, 14) : std::vector<int>(n, -1));
    MPI_Request req[2];
    MPI_Iallreduce(mine, sum, static_cast<int>(n), MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req[0]);
    MPI_Ibcast(b, static_cast<int>(n), MPI_INT, 0, MPI_COMM_WORLD, &req[1]);
    MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
    std::vector<int> want(n, 0);
    for (int r = 0; r < g_size; ++r) {
      const auto v = values(r, n, 13);
      for (size_t i = 0; i < n; ++i) want[i] += v[i];
    }
    expect(host_of(sum, n) == want && host_of(b, n) == values(0, n, 14),
           "MPI_Iallreduce and MPI_Ibcast of device buffers");
    // MPI_Igather to rank 0, MPI_Iscatter back from it, MPI_Iscan.
    const size_t k = 32;
    const size_t all_n = k * static_cast<size_t>(g_size);
    int* part = device_ints(values(g_rank, k, 15));
    int* all = device_ints(std::vector<int>(all_n, -1));
    int* back = device_ints(std::vector<int>(k, -1));
    int* prefix = device_ints(std::vector<int>(k, -1));
    MPI_Request more[2];
    MPI_Igather(part, static_cast<int>(k), MPI_INT, all, static_cast<int>(k), MPI_INT, 0, MPI_COMM_WORLD, &more[0]);
    MPI_Iscan(part, prefix, static_cast<int>(k), MPI_INT, MPI_SUM, MPI_COMM_WORLD, &more[1]);
    MPI_Waitall(2, more, MPI_STATUSES_IGNORE);
    MPI_Iscatter(all, static_cast<int>(k), MPI_INT, back, static_cast<int>(k), MPI_INT, 0, MPI_COMM_WORLD, &more[0]);
    MPI_Wait(&more[0], MPI_STATUS_IGNORE);
    bool ok = host_of(back, k) == values(g_rank, k, 15);
    const std::vector<int> scan = host_of(prefix, k);
    for (size_t i = 0; i < k; ++i) {
      int w = 0;
      for (int r = 0; r <= g_rank; ++r) w += values(r, k, 15)[i];
      ok = ok && scan[i] == w;
    }
    expect(ok, "MPI_Igather, MPI_Iscatter and MPI_Iscan of device buffers");
    for (int* p : {mine, sum, b, part, all, back, prefix}) CHECK(cudaFree(p));
  }

  // MPI_Mprobe + MPI_Mrecv into a device buffer; MPI_Reduce_local and MPI_Pack/MPI_Unpack on
  // device buffers.
  {
    const size_t n = 300;
    int* s = device_ints(values(g_rank, n, 16));
    int* r = device_ints(std::vector<int>(n, -1));
    MPI_Request req;
    MPI_Isend(s, static_cast<int>(n), MPI_INT, right, 16, MPI_COMM_WORLD, &req);
    MPI_Message msg;
    MPI_Status st;
    MPI_Mprobe(left, 16, MPI_COMM_WORLD, &msg, &st);
    int count = 0;
    MPI_Get_count(&st, MPI_INT, &count);
    MPI_Mrecv(r, count, MPI_INT, &msg, MPI_STATUS_IGNORE);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    bool ok = count == static_cast<int>(n) && host_of(r, n) == values(left, n, 16);
    MPI_Reduce_local(s, r, static_cast<int>(n), MPI_INT, MPI_SUM);
    const std::vector<int> a = values(g_rank, n, 16), b = values(left, n, 16), got = host_of(r, n);
    for (size_t i = 0; i < n; ++i) ok = ok && got[i] == a[i] + b[i];
    int* packed = device_ints(std::vector<int>(n + 8, 0));
    int position = 0;
    MPI_Pack(s, static_cast<int>(n), MPI_INT, packed, static_cast<int>((n + 8) * sizeof(int)), &position, MPI_COMM_WORLD);
    int* unpacked = device_ints(std::vector<int>(n, -1));
    int at = 0;
    MPI_Unpack(packed, position, &at, unpacked, static_cast<int>(n), MPI_INT, MPI_COMM_WORLD);
    ok = ok && position == static_cast<int>(n * sizeof(int)) && host_of(unpacked, n) == a;
    expect(ok, "MPI_Mrecv, MPI_Reduce_local, MPI_Pack and MPI_Unpack with device buffers");
    for (int* p : {s, r, packed, unpacked}) CHECK(cudaFree(p));
  }

  // Neighbourhood collectives on a periodic ring (a 1-D Cartesian communicator): neighbours are the
  // left then the right rank (from 3 ranks: with 2 both neighbours are the same rank, and which of
  // its two messages lands in which block is the MPI library's choice).
  if (g_size >= 3) {
    MPI_Comm ring_comm;
    const int dims[1] = {g_size}, periods[1] = {1};
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring_comm);
    const size_t k = 16;
    int* mine = device_ints(values(g_rank, k, 17));
    int* both = device_ints(std::vector<int>(2 * k, -1));
    MPI_Neighbor_allgather(mine, static_cast<int>(k), MPI_INT, both, static_cast<int>(k), MPI_INT, ring_comm);
    std::vector<int> want = values(left, k, 17);
    const std::vector<int> from_right = values(right, k, 17);
    want.insert(want.end(), from_right.begin(), from_right.end());
    bool ok = host_of(both, 2 * k) == want;
    // Alltoall: block 0 goes left, block 1 right; block 0 comes from the left (its block 1).
    int* blocks = device_ints(values(g_rank, 2 * k, 18));
    MPI_Request req;
    MPI_Ineighbor_alltoall(blocks, static_cast<int>(k), MPI_INT, both, static_cast<int>(k), MPI_INT, ring_comm, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    const std::vector<int> got = host_of(both, 2 * k), l = values(left, 2 * k, 18), r = values(right, 2 * k, 18);
    for (size_t i = 0; i < k; ++i) ok = ok && got[i] == l[k + i] && got[k + i] == r[i];
    expect(ok, "MPI_Neighbor_allgather and MPI_Ineighbor_alltoall of device buffers");
    for (int* p : {mine, both, blocks}) CHECK(cudaFree(p));
    MPI_Comm_free(&ring_comm);
  }

  // A freed device buffer: MPI_ERR_BUFFER through the communicator's error handler (here
  // MPI_ERRORS_RETURN), no crash, and the job goes on.
  {
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    int* gone = device_ints(std::vector<int>(256, 1));
    CHECK(cudaFree(gone));
    const int rc = MPI_Send(gone, 256, MPI_INT, right, 9, comm);
    int cls = 0;
    MPI_Error_class(rc, &cls);
    expect(cls == MPI_ERR_BUFFER, "MPI_Send of a freed device buffer fails with MPI_ERR_BUFFER");
    MPI_Comm_free(&comm);
    ring(10);
  }

  std::printf("rank %d: %s\n", g_rank, g_failed == 0 ? "all ok" : "FAILED");
  MPI_Finalize();
  return g_failed == 0 ? 0 : 1;
}

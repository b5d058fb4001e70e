// GPU-local messages (FUNNEL_MPI_LOCAL=1; doc/mpi.md, "GPU-local messages"), for
// tests/mpi/local_messages.sh: device-buffer messages between ranks of one funnel-server go device
// to device through the server's mailbox.  Ring MPI_Sendrecv (small, 1 MiB, zero elements),
// MPI_Isend/MPI_Irecv completed by MPI_Waitall, MPI_Wait, an MPI_Test loop, MPI_Waitany and
// MPI_Waitsome, blocking MPI_Send/MPI_Recv and MPI_Ssend in turn, MPI_Sendrecv_replace, persistent requests, two messages of one envelope
// in order, a GPU-local and a host message in one MPI_Waitall, a message to itself, the receive's
// status (source, tag, count), a receive larger than the message, a receive smaller than it
// (MPI_ERR_TRUNCATE), MPI_Probe and MPI_Iprobe, MPI_Mprobe/MPI_Improbe with MPI_Mrecv/MPI_Imrecv
// (into device and host memory), MPI_Cancel (not done, said; the receive completes), a receive from a rank that left the server, sub-communicators (MPI_Comm_split, MPI_Comm_dup, MPI_Cart_create), the
// buffered sends and a freed send, the refusals (MPI_ANY_SOURCE into a device buffer, a strided datatype, MPI_Bsend_init), and a staged
// collective on device buffers next to them.  Every check compares what a device buffer holds
// afterwards with what the ranks' values make it.  Prints "rank R: all ok" or FAIL lines.
#include <mpi.h>

#include "device_ints.h"
#include "funnel/funnel.h"

namespace {

// The ring with MPI_Sendrecv on `comm`: each rank sends to the right and receives from the left.
void ring(MPI_Comm comm, size_t n, int salt, const char* what) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  int* s = device_ints(values(rank, n, salt));
  int* r = device_ints(std::vector<int>(n + 1, -1));
  MPI_Status st;
  MPI_Sendrecv(s, static_cast<int>(n), MPI_INT, right, salt, r, static_cast<int>(n), MPI_INT, left, salt, comm, &st);
  int count = -1;
  MPI_Get_count(&st, MPI_INT, &count);
  expect(host_of(r, n) == values(left, n, salt) && host_of(r + n, 1)[0] == -1, what);
  expect(count == static_cast<int>(n) && st.MPI_SOURCE == left && st.MPI_TAG == salt, "the ring receive's status");
  CHECK(cudaFree(s));
  CHECK(cudaFree(r));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  const int right = (g_rank + 1) % g_size, left = (g_rank + g_size - 1) % g_size;
  ring(MPI_COMM_WORLD, 1000, 1, "ring MPI_Sendrecv of device buffers");
  ring(MPI_COMM_WORLD, 1 << 18, 2, "ring MPI_Sendrecv of 1 MiB device buffers");
  ring(MPI_COMM_WORLD, 0, 3, "ring MPI_Sendrecv of zero elements");

  // Isend/Irecv both ways round the ring: MPI_Waitall, then MPI_Wait and an MPI_Test loop, then
  // MPI_Waitany and MPI_Waitsome.
  {
    const size_t n = 4096;
    int* to_right = device_ints(values(g_rank, n, 4));
    int* to_left = device_ints(values(g_rank, n, 5));
    int* from_left = device_ints(std::vector<int>(n, -1));
    int* from_right = device_ints(std::vector<int>(n, -1));
    MPI_Request req[4];
    MPI_Irecv(from_left, static_cast<int>(n), MPI_INT, left, 1, MPI_COMM_WORLD, &req[0]);
    MPI_Irecv(from_right, static_cast<int>(n), MPI_INT, right, 2, MPI_COMM_WORLD, &req[1]);
    MPI_Isend(to_right, static_cast<int>(n), MPI_INT, right, 1, MPI_COMM_WORLD, &req[2]);
    MPI_Isend(to_left, static_cast<int>(n), MPI_INT, left, 2, MPI_COMM_WORLD, &req[3]);
    MPI_Status st[4];
    MPI_Waitall(4, req, st);
    int count = -1;
    MPI_Get_count(&st[1], MPI_INT, &count);
    expect(host_of(from_left, n) == values(left, n, 4) && host_of(from_right, n) == values(right, n, 5),
           "MPI_Isend/MPI_Irecv of device buffers with MPI_Waitall");
    expect(count == static_cast<int>(n) && st[1].MPI_SOURCE == right && st[1].MPI_TAG == 2 &&
               req[0] == MPI_REQUEST_NULL && req[3] == MPI_REQUEST_NULL,
           "MPI_Waitall's statuses and requests");
    MPI_Irecv(from_left, static_cast<int>(n), MPI_INT, left, 3, MPI_COMM_WORLD, &req[0]);
    MPI_Isend(to_left, static_cast<int>(n), MPI_INT, right, 3, MPI_COMM_WORLD, &req[1]);
    MPI_Wait(&req[1], MPI_STATUS_IGNORE);
    for (int flag = 0; flag == 0;) MPI_Test(&req[0], &flag, MPI_STATUS_IGNORE);
    expect(host_of(from_left, n) == values(left, n, 5), "MPI_Irecv of a device buffer completed by MPI_Test");
    MPI_Irecv(from_left, static_cast<int>(n), MPI_INT, left, 4, MPI_COMM_WORLD, &req[0]);
    MPI_Irecv(from_right, static_cast<int>(n), MPI_INT, right, 5, MPI_COMM_WORLD, &req[1]);
    MPI_Isend(to_right, static_cast<int>(n), MPI_INT, right, 4, MPI_COMM_WORLD, &req[2]);
    MPI_Isend(to_left, static_cast<int>(n), MPI_INT, left, 5, MPI_COMM_WORLD, &req[3]);
    int done = 0;
    while (done < 2) {
      int index = -1;
      MPI_Waitany(4, req, &index, MPI_STATUS_IGNORE);
      expect(index >= 0 && index < 4 && req[index] == MPI_REQUEST_NULL, "MPI_Waitany's index");
      ++done;
    }
    while (done < 4) {
      int outcount = 0, indices[4];
      MPI_Waitsome(4, req, &outcount, indices, MPI_STATUSES_IGNORE);
      expect(outcount >= 1 && outcount != MPI_UNDEFINED, "MPI_Waitsome's count");
      done += outcount;
    }
    expect(host_of(from_left, n) == values(left, n, 4) && host_of(from_right, n) == values(right, n, 5),
           "MPI_Isend/MPI_Irecv of device buffers with MPI_Waitany and MPI_Waitsome");
    for (int* p : {to_right, to_left, from_left, from_right}) CHECK(cudaFree(p));
  }

  // Blocking sends and receives (even ranks send first; MPI_Ssend the second time), two messages
  // of one envelope that must arrive in order, and a host message in the same MPI_Waitall as a
  // GPU-local one.
  if (g_size % 2 == 0) {
    const size_t n = 777;
    const int partner = g_rank ^ 1;
    int* mine = device_ints(values(g_rank, n, 6));
    int* theirs = device_ints(std::vector<int>(n, -1));
    for (int round = 0; round < 2; ++round) {
      if (g_rank % 2 == 0) {
        if (round == 0) MPI_Send(mine, static_cast<int>(n), MPI_INT, partner, 9, MPI_COMM_WORLD);
        else MPI_Ssend(mine, static_cast<int>(n), MPI_INT, partner, 9, MPI_COMM_WORLD);
        MPI_Recv(theirs, static_cast<int>(n), MPI_INT, partner, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(theirs, static_cast<int>(n), MPI_INT, partner, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(mine, static_cast<int>(n), MPI_INT, partner, 9, MPI_COMM_WORLD);
      }
      expect(host_of(theirs, n) == values(partner, n, 6), "blocking MPI_Send/MPI_Ssend and MPI_Recv of device buffers");
    }
    int* first = device_ints(values(g_rank, n, 7));
    int* second = device_ints(values(g_rank, n, 8));
    int* got1 = device_ints(std::vector<int>(n, -1));
    int* got2 = device_ints(std::vector<int>(n, -1));
    std::vector<int> host_out = values(g_rank, 5, 9), host_in(5, -1);
    MPI_Request req[6];
    MPI_Isend(first, static_cast<int>(n), MPI_INT, partner, 10, MPI_COMM_WORLD, &req[0]);
    MPI_Isend(second, static_cast<int>(n), MPI_INT, partner, 10, MPI_COMM_WORLD, &req[1]);
    MPI_Isend(host_out.data(), 5, MPI_INT, partner, 11, MPI_COMM_WORLD, &req[2]);
    MPI_Irecv(got1, static_cast<int>(n), MPI_INT, partner, 10, MPI_COMM_WORLD, &req[3]);
    MPI_Irecv(got2, static_cast<int>(n), MPI_INT, partner, 10, MPI_COMM_WORLD, &req[4]);
    MPI_Irecv(host_in.data(), 5, MPI_INT, partner, 11, MPI_COMM_WORLD, &req[5]);
    MPI_Waitall(6, req, MPI_STATUSES_IGNORE);
    expect(host_of(got1, n) == values(partner, n, 7) && host_of(got2, n) == values(partner, n, 8),
           "two GPU-local messages of one envelope, in order");
    expect(host_in == values(partner, 5, 9), "a host message in the same MPI_Waitall");
    for (int* p : {mine, theirs, first, second, got1, got2}) CHECK(cudaFree(p));
  }

  // A message to itself; a receive larger than its message (the status counts the message).
  {
    int* s = device_ints(values(g_rank, 100, 12));
    int* r = device_ints(std::vector<int>(200, -1));
    MPI_Request req;
    MPI_Status st;
    MPI_Irecv(r, 200, MPI_INT, g_rank, 12, MPI_COMM_WORLD, &req);
    MPI_Send(s, 100, MPI_INT, g_rank, 12, MPI_COMM_WORLD);
    MPI_Wait(&req, &st);
    int count = -1;
    MPI_Get_count(&st, MPI_INT, &count);
    const std::vector<int> got = host_of(r, 200);
    expect(std::vector<int>(got.begin(), got.begin() + 100) == values(g_rank, 100, 12) && got[100] == -1 && count == 100,
           "a GPU-local message to itself into a larger receive (status count 100)");
    CHECK(cudaFree(s));
    CHECK(cudaFree(r));
  }

  // MPI_Sendrecv_replace of a device buffer round the ring (sent from a copy of its own).
  {
    const size_t n = 1500;
    int* b = device_ints(values(g_rank, n, 40));
    MPI_Status st;
    MPI_Sendrecv_replace(b, static_cast<int>(n), MPI_INT, right, 40, left, 40, MPI_COMM_WORLD, &st);
    int count = -1;
    MPI_Get_count(&st, MPI_INT, &count);
    expect(host_of(b, n) == values(left, n, 40) && count == static_cast<int>(n) && st.MPI_SOURCE == left,
           "MPI_Sendrecv_replace of a device buffer, GPU-local");
    CHECK(cudaFree(b));
  }

  // Persistent requests round the ring: started three times with new values, completed by
  // MPI_Waitall twice and by an MPI_Testany loop once (their statuses are the messages', not the
  // placeholders'), then freed.
  {
    const size_t n = 2048;
    int* s = device_ints(values(g_rank, n, 30));
    int* r = device_ints(std::vector<int>(n, -1));
    MPI_Request req[2];
    MPI_Recv_init(r, static_cast<int>(n), MPI_INT, left, 30, MPI_COMM_WORLD, &req[0]);
    MPI_Send_init(s, static_cast<int>(n), MPI_INT, right, 30, MPI_COMM_WORLD, &req[1]);
    for (int round = 0; round < 3; ++round) {
      const std::vector<int> mine = values(g_rank, n, 30 + round);
      CHECK(cudaMemcpy(s, mine.data(), n * sizeof(int), cudaMemcpyHostToDevice));
      MPI_Startall(2, req);
      MPI_Status st[2];
      if (round < 2) {
        MPI_Waitall(2, req, st);
      } else {
        for (int done = 0; done < 2;) {
          int index = -1, flag = 0;
          MPI_Status one;
          MPI_Testany(2, req, &index, &flag, &one);
          expect(flag == 0 || index != MPI_UNDEFINED, "MPI_Testany says all inactive while one still waits");
          if (flag == 0 || index == MPI_UNDEFINED) continue;
          st[index] = one;
          ++done;
        }
      }
      int count = -1;
      MPI_Get_count(&st[0], MPI_INT, &count);
      expect(host_of(r, n) == values(left, n, 30 + round), "persistent GPU-local requests, started again");
      expect(count == static_cast<int>(n) && st[0].MPI_SOURCE == left && st[0].MPI_TAG == 30,
             "a persistent GPU-local receive's status");
    }
    MPI_Request_free(&req[0]);
    MPI_Request_free(&req[1]);
    CHECK(cudaFree(s));
    CHECK(cudaFree(r));
  }

  // Buffered sends return at once, before their receives are posted (every rank sends first),
  // and their buffer is free at once; a send whose request is freed still arrives.
  {
    const size_t n = 700;
    std::vector<char> attached(1 << 20);
    MPI_Buffer_attach(attached.data(), static_cast<int>(attached.size()));  // as MPI_Bsend needs (unused here)
    int* s1 = device_ints(values(g_rank, n, 50));
    int* s2 = device_ints(values(g_rank, n, 51));
    int* s3 = device_ints(values(g_rank, n, 52));
    MPI_Bsend(s1, static_cast<int>(n), MPI_INT, right, 50, MPI_COMM_WORLD);
    CHECK(cudaMemset(s1, 0, n * sizeof(int)));  // the message is its copy's now
    MPI_Request ib = MPI_REQUEST_NULL, freed = MPI_REQUEST_NULL;
    MPI_Ibsend(s2, static_cast<int>(n), MPI_INT, right, 51, MPI_COMM_WORLD, &ib);
    int flag = 0;
    MPI_Test(&ib, &flag, MPI_STATUS_IGNORE);
    expect(flag != 0, "MPI_Ibsend's request is complete at once");
    MPI_Isend(s3, static_cast<int>(n), MPI_INT, right, 52, MPI_COMM_WORLD, &freed);
    MPI_Request_free(&freed);
    std::vector<int*> got;
    for (int tag = 50; tag <= 52; ++tag) {
      got.push_back(device_ints(std::vector<int>(n, -1)));
      MPI_Recv(got.back(), static_cast<int>(n), MPI_INT, left, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      expect(host_of(got.back(), n) == values(left, n, tag), "MPI_Bsend, MPI_Ibsend and a freed MPI_Isend, GPU-local");
    }
    MPI_Barrier(MPI_COMM_WORLD);  // every receive done: the freed send's buffer may go
    for (int* p : {s1, s2, s3, got[0], got[1], got[2]}) CHECK(cudaFree(p));
    void* back = nullptr;
    int size = 0;
    MPI_Buffer_detach(&back, &size);
  }

  // Sub-communicators: a split into even and odd ranks, a duplicate, a periodic 1-D Cartesian one.
  {
    MPI_Comm halves, dup, cart;
    MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, -g_rank, &halves);  // reversed order
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    const int dims[1] = {g_size}, periods[1] = {1};
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &cart);
    ring(halves, 300, 13, "ring on an MPI_Comm_split communicator");
    ring(dup, 300, 14, "ring on an MPI_Comm_dup communicator");
    int src = 0, dst = 0;
    MPI_Cart_shift(cart, 0, 1, &src, &dst);
    int* s = device_ints(values(g_rank, 64, 15));
    int* r = device_ints(std::vector<int>(64, -1));
    MPI_Sendrecv(s, 64, MPI_INT, dst, 15, r, 64, MPI_INT, src, 15, cart, MPI_STATUS_IGNORE);
    expect(host_of(r, 64) == values(src, 64, 15), "MPI_Cart_shift neighbours on an MPI_Cart_create communicator");
    CHECK(cudaFree(s));
    CHECK(cudaFree(r));
    MPI_Comm_free(&halves);
    MPI_Comm_free(&dup);
    MPI_Comm_free(&cart);
  }

  // MPI_Probe and MPI_Iprobe see a GPU-local send waiting for its receive (the size learnt from the
  // status, the buffer made to fit), by name and with wildcards; the message is then received.
  {
    const size_t n = 777;
    int* s = device_ints(values(g_rank, n, 30));
    MPI_Request req;
    MPI_Isend(s, int(n), MPI_INT, right, 30, MPI_COMM_WORLD, &req);
    MPI_Status st;
    MPI_Probe(left, 30, MPI_COMM_WORLD, &st);
    int count = -1;
    MPI_Get_count(&st, MPI_INT, &count);
    expect(st.MPI_SOURCE == left && st.MPI_TAG == 30 && count == int(n), "MPI_Probe of a GPU-local message");
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
    MPI_Get_count(&st, MPI_INT, &count);
    expect(flag == 1 && st.MPI_SOURCE == left && st.MPI_TAG == 30 && count == int(n),
           "MPI_Iprobe with wildcards of a GPU-local message");
    int* r = device_ints(std::vector<int>(size_t(count), -1));
    MPI_Recv(r, count, MPI_INT, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    expect(host_of(r, n) == values(left, n, 30), "the probed GPU-local message received");
    MPI_Iprobe(left, 30, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    expect(flag == 0, "MPI_Iprobe finds nothing once the message was received");
    CHECK(cudaFree(s));
    CHECK(cudaFree(r));
  }

  // MPI_Mprobe and MPI_Improbe match a GPU-local send: a receive of the same envelope after the
  // matched probe takes the next message, MPI_Mrecv the matched one into a device buffer,
  // MPI_Imrecv one matched with wildcards into host memory (through a device buffer of the hooks').
  {
    const size_t n = 513;
    int* s1 = device_ints(values(g_rank, n, 31));
    int* s2 = device_ints(values(g_rank + 100, n, 31));
    MPI_Request reqs[2];
    MPI_Isend(s1, int(n), MPI_INT, right, 31, MPI_COMM_WORLD, &reqs[0]);
    MPI_Isend(s2, int(n), MPI_INT, right, 31, MPI_COMM_WORLD, &reqs[1]);
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status st;
    MPI_Mprobe(left, 31, MPI_COMM_WORLD, &msg, &st);
    int count = -1;
    MPI_Get_count(&st, MPI_INT, &count);
    expect(st.MPI_SOURCE == left && st.MPI_TAG == 31 && count == int(n) && msg != MPI_MESSAGE_NULL,
           "MPI_Mprobe of a GPU-local message");
    int* r2 = device_ints(std::vector<int>(n, -1));
    MPI_Recv(r2, int(n), MPI_INT, left, 31, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    expect(host_of(r2, n) == values(left + 100, n, 31), "a receive after MPI_Mprobe takes the next message");
    int* r1 = device_ints(std::vector<int>(n, -1));
    MPI_Mrecv(r1, count, MPI_INT, &msg, &st);
    MPI_Get_count(&st, MPI_INT, &count);
    expect(msg == MPI_MESSAGE_NULL && count == int(n) && st.MPI_SOURCE == left && host_of(r1, n) == values(left, n, 31),
           "MPI_Mrecv of the matched GPU-local message");
    MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);
    MPI_Isend(s1, int(n), MPI_INT, right, 32, MPI_COMM_WORLD, &reqs[0]);
    int flag = 0;
    while (flag == 0) MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &msg, &st);
    expect(st.MPI_SOURCE == left && st.MPI_TAG == 32, "MPI_Improbe with wildcards of a GPU-local message");
    std::vector<int> host(n, -1);
    MPI_Request rr;
    MPI_Imrecv(host.data(), int(n), MPI_INT, &msg, &rr);
    MPI_Wait(&rr, &st);
    MPI_Get_count(&st, MPI_INT, &count);
    expect(msg == MPI_MESSAGE_NULL && host == values(left, n, 31) && count == int(n) && st.MPI_SOURCE == left &&
               st.MPI_TAG == 32,
           "MPI_Imrecv of a matched GPU-local message into host memory");
    MPI_Wait(&reqs[0], MPI_STATUS_IGNORE);
    CHECK(cudaFree(s1));
    CHECK(cudaFree(s2));
    CHECK(cudaFree(r1));
    CHECK(cudaFree(r2));
  }

  // MPI_Cancel of a GPU-local receive is not done (said on stderr once): the request completes
  // with its message, and MPI_Test_cancelled says false.
  {
    const size_t n = 64;
    int* s = device_ints(values(g_rank, n, 41));
    int* r = device_ints(std::vector<int>(n, -1));
    MPI_Request req;
    MPI_Irecv(r, int(n), MPI_INT, left, 41, MPI_COMM_WORLD, &req);
    expect(MPI_Cancel(&req) == MPI_SUCCESS, "MPI_Cancel of a GPU-local receive returns");
    MPI_Send(s, int(n), MPI_INT, right, 41, MPI_COMM_WORLD);
    MPI_Status st;
    MPI_Wait(&req, &st);
    int cancelled = -1;
    MPI_Test_cancelled(&st, &cancelled);
    expect(cancelled == 0 && host_of(r, n) == values(left, n, 41),
           "a GPU-local receive asked to cancel completes with its message");
    CHECK(cudaFree(s));
    CHECK(cudaFree(r));
  }

  // Errors through the communicator's handler (MPI_ERRORS_RETURN): a receive smaller than its
  // message; the refusals.
  {
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    int* s = device_ints(values(g_rank, 50, 16));
    int* r = device_ints(std::vector<int>(50, -1));
    MPI_Request req;
    MPI_Isend(s, 50, MPI_INT, right, 16, comm, &req);
    int rc = MPI_Recv(r, 20, MPI_INT, left, 16, comm, MPI_STATUS_IGNORE);
    int cls = -1;
    MPI_Error_class(rc, &cls);
    expect(cls == MPI_ERR_TRUNCATE, "a receive smaller than its GPU-local message fails with MPI_ERR_TRUNCATE");
    const std::vector<int> sent = values(left, 50, 16);
    expect(host_of(r, 20) == std::vector<int>(sent.begin(), sent.begin() + 20),
           "the truncated receive holds the message's first bytes");
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    rc = MPI_Recv(r, 50, MPI_INT, MPI_ANY_SOURCE, 17, comm, MPI_STATUS_IGNORE);
    MPI_Error_class(rc, &cls);
    expect(cls == MPI_ERR_OTHER, "MPI_ANY_SOURCE into a device buffer is refused (MPI_ERR_OTHER)");
    MPI_Datatype every_other;
    MPI_Type_vector(8, 1, 2, MPI_INT, &every_other);
    MPI_Type_commit(&every_other);
    rc = MPI_Send(s, 1, every_other, right, 18, comm);
    MPI_Error_class(rc, &cls);
    expect(cls == MPI_ERR_TYPE, "a strided datatype between ranks of one server is refused (MPI_ERR_TYPE)");
    MPI_Type_free(&every_other);
    MPI_Request persistent_bsend = MPI_REQUEST_NULL;
    rc = MPI_Bsend_init(s, 50, MPI_INT, right, 19, comm, &persistent_bsend);
    MPI_Error_class(rc, &cls);
    expect(cls == MPI_ERR_OTHER, "MPI_Bsend_init of a device buffer is refused (MPI_ERR_OTHER)");
    CHECK(cudaFree(s));
    CHECK(cudaFree(r));
    MPI_Comm_free(&comm);
  }

  // Collectives stay staged through the host (both sides alike): an MPI_Allreduce of device buffers.
  {
    int* s = device_ints(std::vector<int>(10, g_rank + 1));
    int* r = device_ints(std::vector<int>(10, -1));
    MPI_Allreduce(s, r, 10, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    expect(host_of(r, 10) == std::vector<int>(10, g_size * (g_size + 1) / 2), "MPI_Allreduce of device buffers");
    CHECK(cudaFree(s));
    CHECK(cudaFree(r));
  }

  // A rank that leaves funnel-server (funnel_detach) while a GPU-local receive waits for it: the
  // receive fails (MPI_ERR_OTHER, said on stderr) rather than waiting for ever.
  if (g_size >= 2 && g_rank <= 1) {
    MPI_Comm pair;
    MPI_Comm_split(MPI_COMM_WORLD, 0, g_rank, &pair);
    MPI_Comm_set_errhandler(pair, MPI_ERRORS_RETURN);
    if (g_rank == 0) {
      int* r = device_ints(std::vector<int>(8, -1));
      int* before = device_ints(std::vector<int>(8, -1));
      MPI_Request req[2];
      MPI_Irecv(before, 8, MPI_INT, 1, 21, pair, &req[0]);
      MPI_Irecv(r, 8, MPI_INT, 1, 20, pair, &req[1]);
      MPI_Barrier(pair);  // rank 1 sent tag 21 and leaves after this
      MPI_Barrier(pair);  // and has left
      MPI_Wait(&req[0], MPI_STATUS_IGNORE);
      expect(host_of(before, 8) == values(1, 8, 20), "the message sent before its sender left");
      const int rc = MPI_Wait(&req[1], MPI_STATUS_IGNORE);
      int cls = -1;
      MPI_Error_class(rc, &cls);
      expect(cls == MPI_ERR_OTHER, "a GPU-local receive from a rank that left funnel-server fails (MPI_ERR_OTHER)");
      CHECK(cudaFree(r));
      CHECK(cudaFree(before));
    } else {
      int* s = device_ints(values(g_rank, 8, 20));
      MPI_Send(s, 8, MPI_INT, 0, 21, pair);
      CHECK(cudaFree(s));
      MPI_Barrier(pair);
      expect(funnel_detach() == 0, "funnel_detach");
      MPI_Barrier(pair);
    }
    MPI_Comm_free(&pair);
  } else if (g_size >= 2) {
    MPI_Comm none;
    MPI_Comm_split(MPI_COMM_WORLD, MPI_UNDEFINED, g_rank, &none);
  }

  if (g_failed == 0) std::printf("rank %d: all ok\n", g_rank);
  MPI_Finalize();
  return g_failed == 0 ? 0 : 1;
}

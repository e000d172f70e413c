#include "segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <new>
#include <random>

#include "dptrain/common/error.h"

namespace dpt::dist::transport::shm {
namespace {

constexpr uint64_t kMagic = 0x32306d6873747064;  // "dptshm02"

struct alignas(64) SegmentHeader {
  uint64_t magic = 0;
  uint64_t world_size = 0;
  uint64_t slot_bytes = 0;
};

// Where the slots start: after the header and every rank's control, on a page of their own.
size_t data_offset(int world_size) {
  const size_t control_bytes = sizeof(SegmentHeader) + world_size * sizeof(RankControl);
  return (control_bytes + 4095) / 4096 * 4096;
}

size_t segment_bytes(int world_size, size_t slot_bytes) {
  return data_offset(world_size) + 2 * world_size * slot_bytes;
}

std::string errno_text() { return std::strerror(errno); }

SegmentHeader& header_of(void* base) { return *static_cast<SegmentHeader*>(base); }

}  // namespace

void publish(Counter& counter, uint32_t chunk) {
  counter.value.store(chunk, std::memory_order_release);
  wake_all(counter);
}

void wake_all(Counter& counter) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&counter.value), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void wait_for_change(Counter& counter, uint32_t seen, std::chrono::milliseconds timeout) {
  timespec relative{static_cast<time_t>(timeout.count() / 1000), static_cast<long>(timeout.count() % 1000) * 1000000};
  // Not FUTEX_PRIVATE: the word is shared with other processes. EAGAIN (already changed), EINTR
  // and ETIMEDOUT all send the caller back to look at the word.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&counter.value), FUTEX_WAIT, seen, &relative, nullptr, 0);
}

std::string Segment::unique_name() {
  std::random_device device;
  const uint64_t bits = (static_cast<uint64_t>(device()) << 32) | device();
  char name[64];
  std::snprintf(name, sizeof(name), "/dptrain-%d-%016llx", static_cast<int>(getpid()),
                static_cast<unsigned long long>(bits));
  return name;
}

std::unique_ptr<Segment> Segment::create(const std::string& name, int world_size, size_t slot_bytes,
                                         std::string& why) {
  const size_t bytes = segment_bytes(world_size, slot_bytes);
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    why = str("cannot create ", name, " in /dev/shm: ", errno_text());
    return nullptr;
  }
  // Reserved now, so that a full /dev/shm is an error here and not a SIGBUS in the middle of a step.
  if (const int error = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); error != 0) {
    close(fd);
    shm_unlink(name.c_str());
    why = str("/dev/shm has no room for ", bytes >> 20, " MiB (", std::strerror(error), ")");
    return nullptr;
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(name.c_str());
    why = str("cannot map ", name, ": ", errno_text());
    return nullptr;
  }
  std::unique_ptr<Segment> segment(new Segment(base, world_size, slot_bytes));
  new (base) SegmentHeader{kMagic, static_cast<uint64_t>(world_size), slot_bytes};
  for (int r = 0; r < world_size; ++r) new (&segment->control(r)) RankControl();
  return segment;
}

std::unique_ptr<Segment> Segment::open(const std::string& name, int world_size, size_t slot_bytes,
                                       std::string& why) {
  const size_t bytes = segment_bytes(world_size, slot_bytes);
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    why = str("cannot open rank 0's ", name, " (", errno_text(), "): not on rank 0's host, or another /dev/shm");
    return nullptr;
  }
  struct stat info {};
  if (fstat(fd, &info) != 0 || static_cast<size_t>(info.st_size) != bytes) {
    close(fd);
    why = str(name, " is not the size expected for ", world_size, " ranks");
    return nullptr;
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    why = str("cannot map ", name, ": ", errno_text());
    return nullptr;
  }
  std::unique_ptr<Segment> segment(new Segment(base, world_size, slot_bytes));
  const SegmentHeader& header = header_of(base);
  if (header.magic != kMagic || header.world_size != static_cast<uint64_t>(world_size) ||
      header.slot_bytes != slot_bytes) {
    why = str(name, " was made for another group");
    return nullptr;
  }
  return segment;
}

Segment::Segment(void* base, int world_size, size_t slot_bytes)
    : base_(static_cast<char*>(base)),
      data_offset_(data_offset(world_size)),
      bytes_(segment_bytes(world_size, slot_bytes)),
      slot_bytes_(slot_bytes) {}

Segment::~Segment() { munmap(base_, bytes_); }

RankControl& Segment::control(int rank) {
  return reinterpret_cast<RankControl*>(base_ + sizeof(SegmentHeader))[rank];
}

}  // namespace dpt::dist::transport::shm

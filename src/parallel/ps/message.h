#pragma once
// The parameter server's wire format, over the point-to-point operations of the job's
// Communicator (bounded, recorded and classified as its collectives are). A worker's messages to
// a server go on tag b (bucket b): a header, then bucket b's chunk of the gradient. The server
// answers a push on the same tag with the chunk's updated weights. State travels on its own tags:
// [header | weights | momentum] per bucket, from rank 0 when the job starts (the servers' starting
// point) and from a server when a worker asks (State request: rank 0 before a checkpoint, every
// worker to take the servers' weights at the start).

#include <ATen/ATen.h>

#include <cstdint>
#include <cstring>

namespace dpt::ps::wire {

enum class Request : int32_t { Push = 1, State = 2, Stop = 3 };

// 32 bytes at the front of a float32 message: 8 floats.
struct Header {
  int64_t step = 0;  // the worker's step (its pushes so far)
  double lr = 0;     // the learning rate of this push
  Request request = Request::Push;
  int32_t has_momentum = 0;  // state messages: whether the momentum part holds a buffer
  int64_t reserved = 0;
};
constexpr int64_t kHeaderFloats = sizeof(Header) / sizeof(float);
static_assert(sizeof(Header) % sizeof(float) == 0, "the header fills whole floats");

inline void write_header(at::Tensor& message, const Header& header) {
  std::memcpy(message.data_ptr<float>(), &header, sizeof(Header));
}

inline Header read_header(const at::Tensor& message) {
  Header header;
  std::memcpy(static_cast<void*>(&header), message.data_ptr<float>(), sizeof(Header));  // (trivially copyable)
  return header;
}

// The payload after the header.
inline at::Tensor payload(const at::Tensor& message, int64_t offset, int64_t numel) {
  return message.narrow(0, kHeaderFloats + offset, numel);
}

inline int push_tag(size_t bucket) { return static_cast<int>(bucket); }
// Far above any bucket count.
inline int state_tag(size_t bucket) { return (1 << 20) + static_cast<int>(bucket); }

// "a push", "a state request", "a stop request": for the flight recorder and error messages.
const char* to_string(Request request);

}  // namespace dpt::ps::wire

#include "message.h"

namespace dpt::ps::wire {

const char* to_string(Request request) {
  switch (request) {
    case Request::Push: return "a push";
    case Request::State: return "a state request";
    case Request::Stop: return "a stop request";
  }
  return "an unknown request";
}

}  // namespace dpt::ps::wire

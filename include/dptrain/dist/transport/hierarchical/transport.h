#pragma once
// The hierarchical allreduce, for jobs whose machines each run several ranks (Horovod's
// HOROVOD_HIERARCHICAL_ALLREDUCE): a float CPU all_reduce goes
//
//   1. within each machine, through shared memory (shm/allreduce.h): the rank that leads it (its
//      lowest) ends with the machine's sum;
//   2. across machines, by the leaders only, through a Gloo group of them;
//   3. back within each machine, broadcast from the leader through shared memory.
//
// Over the network each machine then sends its gradient once instead of once per rank: a ring of
// 2 machines x 2 ranks carries 1.5 times a gradient each way over the link between the machines,
// the leaders' ring of 2 carries one. The operations pass the steps in the order they were
// started, as a pipeline (the machine reduces the next one while the leaders send this one), so
// that the link between machines does not wait for shared memory. The sums are
// those of the flat allreduce in another order: equal where the order cannot matter (maximum,
// minimum, sums that are exact), else within float rounding (the flat ring's order is Gloo's).
// Everything else (other types and operations, broadcast, all_gather, reduce_scatter, point to
// point) goes through the whole job's backend.
//
// make_transport (transport.h) builds it when the ranks of a Gloo job, asked through the store,
// all want it and some machine runs two ranks or more: it is then the job's transport, and
// describe() says "gloo + hierarchical (2 machines x 2 ranks)".

#include <memory>
#include <string>

#include "dptrain/dist/transport/over_backend.h"
#include "dptrain/dist/transport/process_group/transport.h"
#include "dptrain/dist/transport/shm/allreduce.h"

namespace dpt::dist::transport::hierarchical {

class Transport : public OverBackend {
 public:
  // What the steps go through on this rank.
  struct Groups {
    // Steps 1 and 3 among this machine's ranks, each in a shared-memory group of its own (so that
    // each keeps its operations' order while they overlap); null where the machine runs this rank only.
    std::unique_ptr<shm::Allreduce> reductions;
    std::unique_ptr<shm::Allreduce> broadcasts;
    // Step 2: the machines' leaders' group; on the leader only.
    std::unique_ptr<process_group::Transport> leaders;
  };

  // `layout` describes the machines (describe()) of the job's `world_size` ranks; `job` is the
  // whole job's transport, for everything else.
  Transport(std::string layout, int world_size, Groups groups, std::unique_ptr<process_group::Transport> job,
            std::chrono::milliseconds timeout);
  ~Transport() override;

  std::string describe() const override;
  compat::WorkPtr all_reduce(at::Tensor tensor, ReduceOp op, const CollectiveRecord& record) override;
  std::chrono::milliseconds failure_report_delay() const override { return shm::Allreduce::kFailureReportDelay; }

 private:
  struct Steps;  // the pipeline that takes each operation through the three steps

  int world_size_;
  std::string layout_;
  std::unique_ptr<Steps> steps_;
};

}  // namespace dpt::dist::transport::hierarchical

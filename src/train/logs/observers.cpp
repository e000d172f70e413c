#include "dptrain/train/logs/observers.h"

#include "dptrain/common/error.h"
#include "dptrain/train/logs/console_observer.h"
#include "dptrain/train/logs/jsonl_observer.h"
#include "dptrain/train/logs/tensorboard_observer.h"

namespace dpt::train {

std::vector<std::shared_ptr<TrainObserver>> make_observers(const LogOptions& options) {
  checked_print_freq(options.print_freq());
  std::vector<std::shared_ptr<TrainObserver>> observers;
  if (options.console() != nullptr) {
    observers.push_back(std::make_shared<ConsoleObserver>(ConsoleOptions()
                                                              .out(options.console())
                                                              .print_freq(options.print_freq())
                                                              .interactive(options.interactive())));
  }
  if (options.output_dir().empty()) return observers;
  if (options.jsonl()) {
    observers.push_back(std::make_shared<JsonlObserver>(
        JsonlOptions(options.output_dir()).print_freq(options.print_freq())));
  }
  if (options.tensorboard()) {
    observers.push_back(std::make_shared<TensorBoardObserver>(
        TensorBoardOptions(options.output_dir()).print_freq(options.print_freq())));
  }
  return observers;
}

}  // namespace dpt::train

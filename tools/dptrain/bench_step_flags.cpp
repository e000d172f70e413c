#include "bench_step_flags.h"

#include "number_bounds.h"

namespace dpt::cli {

void add_bench_step_flags(CLI::App& app, BenchStepFlags& flags, const std::string& each) {
  app.add_option("--arch,-a", flags.arch, "model from the registry")->capture_default_str();
  app.add_option("--batch-size,-b", flags.batch_size, "images per " + each + " and step")
      ->check(at_least(1))
      ->capture_default_str();
  app.add_option("--image-size", flags.image_size, "height and width of the random images")
      ->check(at_least(8))
      ->capture_default_str();
  app.add_option("--steps", flags.steps, "measured steps")->check(at_least(1))->capture_default_str();
  app.add_option("--warmup", flags.warmup, "steps run before measuring")->check(at_least(0))->capture_default_str();
  app.add_option("--threads", flags.threads, "intra-op threads per " + each)
      ->check(at_least(1))
      ->capture_default_str();
}

}  // namespace dpt::cli

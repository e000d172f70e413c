#include "dptrain/optim/model_ema.h"

#include <gtest/gtest.h>

#include <torch/torch.h>

#include <string>

#include "dptrain/common/error.h"
#include "dptrain/models/registry.h"
#include "dptrain/models/state_dict.h"
#include "support/python_oracle.h"
#include "support/temp_dir.h"

using namespace dpt::optim;
namespace models = dpt::models;

namespace {

constexpr int kUpdates = 4;
constexpr double kDecay = 0.9;

// The model's weights before update k, a function both languages compute alike: floating
// tensors scaled from their initial values, num_batches_tracked counting up by 7s.
void set_weights(torch::nn::Module& model, const models::StateDict& initial, int k) {
  torch::NoGradGuard no_grad;
  for (auto& entry : models::state_dict(model)) {
    const at::Tensor& start = initial[entry.key()];
    if (start.is_floating_point()) {
      entry.value().copy_(start * (1.0 + 0.25 * k) + 0.01 * k);
    } else {
      entry.value().fill_(7 * k + 3);
    }
  }
}

// Python's AveragedModel with torchvision's ema_avg and use_buffers=True (utils.ExponentialMovingAverage),
// updated from the same weights, then reset during a "warm-up" update as train.py does.
const char* kAveragedModel = R"(
import sys, torch, torchvision
from torch.optim.swa_utils import AveragedModel
initial_path, out_path, updates, decay = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
model = torchvision.models.resnet18(num_classes=10)
initial = torch.load(initial_path)
model.load_state_dict(initial)
ema = AveragedModel(model, avg_fn=lambda avg, param, n: decay * avg + (1 - decay) * param, use_buffers=True)
with torch.no_grad():
    for k in range(updates):
        for name, t in model.state_dict().items():
            t.copy_(initial[name] * (1.0 + 0.25 * k) + 0.01 * k if t.is_floating_point() else torch.full_like(t, 7 * k + 3))
        ema.update_parameters(model)
        if k == 0:
            ema.n_averaged.fill_(0)
torch.save(dict(ema.state_dict()), out_path)
print("done")
)";

}  // namespace

// The average of parameters and buffers (batch-norm statistics and their integer counters) after
// a reset and three more updates equals AveragedModel's, names and n_averaged included.
TEST(ModelEma, MatchesPythonsAveragedModel) {
  dpt::testing::TempDir dir;
  torch::manual_seed(0);
  auto model = models::create("resnet18", models::ClassifierOptions().num_classes(10));
  const models::StateDict initial = models::state_dict(*model->clone());
  models::write_state_dict(initial, dir.path() + "/initial.pt");
  const auto out = dpt::testing::run_python(dpt::str("sys.argv = ['', '", dir.path(), "/initial.pt', '", dir.path(),
                                                     "/python.pt', '", kUpdates, "', '", kDecay, "']\n") +
                                            kAveragedModel);
  if (!out) DPT_MISSING_DEPENDENCY(dpt::testing::oracle_missing("torchvision"));
  ASSERT_EQ(*out, "done\n");
  const models::StateDict expected = models::read_state_dict(dir.path() + "/python.pt");

  ModelEma ema(model, kDecay);
  for (int k = 0; k < kUpdates; ++k) {
    set_weights(*model, initial, k);
    ema.update(*model);
    if (k == 0) ema.reset();
  }
  EXPECT_EQ(ema.n_averaged(), kUpdates - 1);
  const models::StateDict ours = ema.state_dict();
  ASSERT_EQ(ours.keys(), expected.keys());
  for (const auto& entry : ours) {
    const at::Tensor& theirs = expected[entry.key()];
    if (theirs.is_floating_point()) {
      EXPECT_TRUE(torch::allclose(entry.value(), theirs, 1e-6, 1e-7)) << entry.key();
    } else {
      EXPECT_TRUE(torch::equal(entry.value(), theirs)) << entry.key() << ": " << entry.value() << " vs " << theirs;
    }
  }

  // A checkpoint's average comes back whole.
  ModelEma restored(model, kDecay);
  restored.load_state_dict(ours);
  EXPECT_EQ(restored.n_averaged(), kUpdates - 1);
  EXPECT_TRUE(torch::equal(restored.state_dict()["module.fc.weight"], ours["module.fc.weight"]));
  models::StateDict wrong;
  wrong.insert("fc.weight", ours["module.fc.weight"]);
  EXPECT_THROW(restored.load_state_dict(wrong), dpt::CheckpointError);
}

// torchvision's adjustment: 1 - min(1, (1 - decay) x world x batch x steps / epochs).
TEST(ModelEma, DecayIsAdjustedAsTorchvisions) {
  EXPECT_NEAR(ema_decay(ModelEmaOptions(), 1024, 600), 1.0 - 2e-5 * 1024 * 32 / 600, 1e-12);
  EXPECT_DOUBLE_EQ(ema_decay(ModelEmaOptions().decay(0.5), 1024, 1), 0.0);  // clamped
  EXPECT_THROW(ema_decay(ModelEmaOptions().steps(0), 256, 10), dpt::ConfigError);
}

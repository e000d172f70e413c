#include <gtest/gtest.h>

#include <torch/torch.h>

#if defined(DPTRAIN_WITH_GLOO)
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

#include "dptrain/compat/compat.h"
#include "dptrain/compat/pickle.h"
#include "dptrain/compat/tcp_store.h"

TEST(Compat, OptimizerStateKeyFindsTheOptimizersEntry) {
  auto weight = torch::ones({3}, torch::requires_grad());
  torch::optim::SGD sgd({weight}, torch::optim::SGDOptions(0.1).momentum(0.9));
  weight.sum().backward();
  sgd.step();
  auto& state = sgd.state();
  using Map = std::decay_t<decltype(state)>;
  auto it = state.find(dpt::compat::optimizer_state_key<Map>(weight));
  ASSERT_NE(it, state.end());
  auto& momentum = static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer();
  EXPECT_TRUE(momentum.equal(torch::ones({3})));
}

TEST(Compat, AutocastGuardCastsAndRestores) {
  auto a = torch::randn({4, 4});
  {
    dpt::compat::AutocastGuard guard(at::kCPU, at::kBFloat16);
    EXPECT_EQ(torch::mm(a, a).scalar_type(), at::kBFloat16);
    {
      dpt::compat::AutocastGuard off(at::kCPU, at::kBFloat16, /*enabled=*/false);
      EXPECT_EQ(torch::mm(a, a).scalar_type(), at::kFloat);
    }
    EXPECT_EQ(torch::mm(a, a).scalar_type(), at::kBFloat16);
  }
  EXPECT_EQ(torch::mm(a, a).scalar_type(), at::kFloat);
}

TEST(Compat, TcpStoreOptionsStartAStoreThisBuildCanServe) {
  auto server_options = dpt::compat::tcp_store_options();
  server_options.port = 0;  // any free port
  server_options.isServer = true;
  server_options.waitWorkers = false;
  server_options.timeout = std::chrono::seconds(10);
  auto server = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", server_options);
  auto client_options = dpt::compat::tcp_store_options();
  client_options.port = server->getPort();
  client_options.timeout = std::chrono::seconds(10);
  auto client = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", client_options);
  client->set("key", std::vector<uint8_t>{7, 8});
  EXPECT_EQ(server->get("key"), (std::vector<uint8_t>{7, 8}));
}

TEST(Compat, TorchVersionIsTheOneCompiledAgainst) {
  EXPECT_EQ(dpt::compat::torch_version().rfind(std::to_string(TORCH_VERSION_MAJOR) + "." +
                                                   std::to_string(TORCH_VERSION_MINOR) + ".",
                                               0),
            0u)
      << dpt::compat::torch_version();
}

// Excerpts of at::show_config() as Debian's LibTorch 1.13 and a PyTorch 2.x wheel print it.
TEST(Compat, TorchBuildReadsBlasAndOneDnnFromLibTorchsReport) {
  const auto debian = dpt::compat::torch_build_from(
      "PyTorch built with:\n  - GCC 12.2\n  - Intel(R) MKL-DNN v2.6.3 (Git Hash N/A)\n  - OpenMP 201511\n"
      "  - Build settings: BLAS_INFO=generic, BUILD_TYPE=RelWithDebInfo, LAPACK_INFO=generic, USE_MKLDNN=ON, \n");
  EXPECT_EQ(debian.blas, "generic");
  EXPECT_EQ(debian.onednn, "2.6.3");
  const auto wheel = dpt::compat::torch_build_from(
      "PyTorch built with:\n  - Intel(R) oneAPI Math Kernel Library Version 2024.2 for Intel(R) 64 architecture\n"
      "  - Intel(R) MKL-DNN v3.7.1 (Git Hash 8d263e693366ef8db40acc569cc7d8edf644556d)\n"
      "  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, CUDA_VERSION=13.0, LAPACK_INFO=mkl, \n");
  EXPECT_EQ(wheel.blas, "mkl");
  EXPECT_EQ(wheel.onednn, "3.7.1");  // not the MKL's 2024.2
  const auto none = dpt::compat::torch_build_from("PyTorch built with:\n  - Build settings: USE_MKLDNN=OFF, \n");
  EXPECT_TRUE(none.blas.empty() && none.onednn.empty());
  EXPECT_FALSE(dpt::compat::torch_build().blas.empty());  // this process's LibTorch names one
}

TEST(Compat, PickleSaveWritesNoTypeTagsAndLoadsBack) {
  c10::Dict<std::string, at::Tensor> weights;
  weights.insert("w", torch::arange(6.0).reshape({2, 3}));
  c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
  state.insert("state_dict", weights);
  state.insert("epoch", int64_t{3});
  state.insert("milestones", c10::List<int64_t>({30, 60}));
  const std::vector<char> bytes = dpt::compat::pickle_save(state);
  const std::string text(bytes.begin(), bytes.end());
  // torch.load(weights_only=True), Python 2.6's default, refuses the calls of torch.jit._pickle
  // (restore_type_tag, build_intlist, ...) that LibTorch's own writer puts in; the process tests
  // load real checkpoints that way.
  EXPECT_EQ(text.find("torch.jit._pickle"), std::string::npos);
  const std::vector<char> tagged = torch::pickle_save(state);
  EXPECT_NE(std::string(tagged.begin(), tagged.end()).find("torch.jit._pickle"), std::string::npos);

  const auto loaded = torch::pickle_load(bytes).toGenericDict();
  EXPECT_EQ(loaded.at("epoch").toInt(), 3);
  EXPECT_TRUE(loaded.at("state_dict").toGenericDict().at("w").toTensor().equal(torch::arange(6.0).reshape({2, 3})));
  const auto milestones = loaded.at("milestones").toList();
  ASSERT_EQ(milestones.size(), 2u);
  EXPECT_EQ(milestones.get(1).toInt(), 60);
}

// What newer LibTorch's merge does to a group whose weight decay equals SGDOptions' own default (0)
// is done here by hand, so that every version checks that the groups get their options back.
TEST(Compat, RestoredGroupsKeepTheOptionsTheyWereGiven) {
  auto a = torch::ones({2}, torch::requires_grad()), b = torch::ones({3}, torch::requires_grad());
  const auto defaults = torch::optim::SGDOptions(0.1).weight_decay(1e-4);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<at::Tensor>{a}, std::make_unique<torch::optim::SGDOptions>(0.1));
  groups.emplace_back(std::vector<at::Tensor>{b});
  auto given = dpt::compat::clone_group_options(groups);
  torch::optim::SGD sgd(std::move(groups), defaults);
  sgd.param_groups()[0].set_options(std::make_unique<torch::optim::SGDOptions>(defaults));
  auto decay = [&](size_t g) {
    return static_cast<const torch::optim::SGDOptions&>(sgd.param_groups()[g].options()).weight_decay();
  };
  ASSERT_EQ(decay(0), 1e-4);
  dpt::compat::restore_group_options(sgd, std::move(given));
  EXPECT_EQ(decay(0), 0.0);
  EXPECT_EQ(decay(1), 1e-4);  // a group given no options keeps the defaults
}

#if defined(DPTRAIN_WITH_GLOO)
// The answer is what Gloo does when asked directly, and where LibTorch's own Gloo is known to
// reduce a type (half in every version before 2.14, bfloat16 from 2.3), it is yes.
TEST(Compat, BackendReducesAnswersWhatGlooDoes) {
  auto options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(30));
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  c10d::ProcessGroupGloo group(c10::make_intrusive<c10d::HashStore>(), 0, 1, options);
  for (const auto type : {at::kHalf, at::kBFloat16}) {
    std::vector<at::Tensor> tensors{at::full({3}, 2.0, at::TensorOptions().dtype(type))};
    bool reduced = true;
    try {
      group.allreduce(tensors)->wait();
    } catch (const std::exception&) {
      reduced = false;
    }
    EXPECT_EQ(dpt::compat::backend_reduces(group, type), reduced) << type;
  }
  if (!DPT_TORCH_AT_LEAST(2, 14)) {
    EXPECT_TRUE(dpt::compat::backend_reduces(group, at::kHalf));
  }
  if (DPT_TORCH_AT_LEAST(2, 3) && !DPT_TORCH_AT_LEAST(2, 14)) {
    EXPECT_TRUE(dpt::compat::backend_reduces(group, at::kBFloat16));
  }
}
#endif

#include "dptrain/data/auto_augment.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "dptrain/common/error.h"

namespace dpt::data {

namespace {

using Op = AugmentOp;

// One sub-policy step of AutoAugment: the op, its probability and its magnitude bin (of 10).
struct PolicyStep {
  Op op;
  double probability;
  int bin;  // -1: the op takes no magnitude
};
using SubPolicy = std::array<PolicyStep, 2>;

// torchvision's AutoAugmentPolicy tables (Cubuk et al., 2019).
const std::vector<SubPolicy>& policy_table(AutoAugmentPolicy policy) {
  static const std::vector<SubPolicy> imagenet = {
      {{{Op::Posterize, 0.4, 8}, {Op::Rotate, 0.6, 9}}},      {{{Op::Solarize, 0.6, 5}, {Op::AutoContrast, 0.6, -1}}},
      {{{Op::Equalize, 0.8, -1}, {Op::Equalize, 0.6, -1}}},   {{{Op::Posterize, 0.6, 7}, {Op::Posterize, 0.6, 6}}},
      {{{Op::Equalize, 0.4, -1}, {Op::Solarize, 0.2, 4}}},    {{{Op::Equalize, 0.4, -1}, {Op::Rotate, 0.8, 8}}},
      {{{Op::Solarize, 0.6, 3}, {Op::Equalize, 0.6, -1}}},    {{{Op::Posterize, 0.8, 5}, {Op::Equalize, 1.0, -1}}},
      {{{Op::Rotate, 0.2, 3}, {Op::Solarize, 0.6, 8}}},       {{{Op::Equalize, 0.6, -1}, {Op::Posterize, 0.4, 6}}},
      {{{Op::Rotate, 0.8, 8}, {Op::Color, 0.4, 0}}},          {{{Op::Rotate, 0.4, 9}, {Op::Equalize, 0.6, -1}}},
      {{{Op::Equalize, 0.0, -1}, {Op::Equalize, 0.8, -1}}},   {{{Op::Invert, 0.6, -1}, {Op::Equalize, 1.0, -1}}},
      {{{Op::Color, 0.6, 4}, {Op::Contrast, 1.0, 8}}},        {{{Op::Rotate, 0.8, 8}, {Op::Color, 1.0, 2}}},
      {{{Op::Color, 0.8, 8}, {Op::Solarize, 0.8, 7}}},        {{{Op::Sharpness, 0.4, 7}, {Op::Invert, 0.6, -1}}},
      {{{Op::ShearX, 0.6, 5}, {Op::Equalize, 1.0, -1}}},      {{{Op::Color, 0.4, 0}, {Op::Equalize, 0.6, -1}}},
      {{{Op::Equalize, 0.4, -1}, {Op::Solarize, 0.2, 4}}},    {{{Op::Solarize, 0.6, 5}, {Op::AutoContrast, 0.6, -1}}},
      {{{Op::Invert, 0.6, -1}, {Op::Equalize, 1.0, -1}}},     {{{Op::Color, 0.6, 4}, {Op::Contrast, 1.0, 8}}},
      {{{Op::Equalize, 0.8, -1}, {Op::Equalize, 0.6, -1}}},
  };
  static const std::vector<SubPolicy> cifar10 = {
      {{{Op::Invert, 0.1, -1}, {Op::Contrast, 0.2, 6}}},         {{{Op::Rotate, 0.7, 2}, {Op::TranslateX, 0.3, 9}}},
      {{{Op::Sharpness, 0.8, 1}, {Op::Sharpness, 0.9, 3}}},      {{{Op::ShearY, 0.5, 8}, {Op::TranslateY, 0.7, 9}}},
      {{{Op::AutoContrast, 0.5, -1}, {Op::Equalize, 0.9, -1}}},  {{{Op::ShearY, 0.2, 7}, {Op::Posterize, 0.3, 7}}},
      {{{Op::Color, 0.4, 3}, {Op::Brightness, 0.6, 7}}},         {{{Op::Sharpness, 0.3, 9}, {Op::Brightness, 0.7, 9}}},
      {{{Op::Equalize, 0.6, -1}, {Op::Equalize, 0.5, -1}}},      {{{Op::Contrast, 0.6, 7}, {Op::Sharpness, 0.6, 5}}},
      {{{Op::Color, 0.7, 7}, {Op::TranslateX, 0.5, 8}}},         {{{Op::Equalize, 0.3, -1}, {Op::AutoContrast, 0.4, -1}}},
      {{{Op::TranslateY, 0.4, 3}, {Op::Sharpness, 0.2, 6}}},     {{{Op::Brightness, 0.9, 6}, {Op::Color, 0.2, 8}}},
      {{{Op::Solarize, 0.5, 2}, {Op::Invert, 0.0, -1}}},         {{{Op::Equalize, 0.2, -1}, {Op::AutoContrast, 0.6, -1}}},
      {{{Op::Equalize, 0.2, -1}, {Op::Equalize, 0.6, -1}}},      {{{Op::Color, 0.9, 9}, {Op::Equalize, 0.6, -1}}},
      {{{Op::AutoContrast, 0.8, -1}, {Op::Solarize, 0.2, 8}}},   {{{Op::Brightness, 0.1, 3}, {Op::Color, 0.7, 0}}},
      {{{Op::Solarize, 0.4, 5}, {Op::AutoContrast, 0.9, -1}}},   {{{Op::TranslateY, 0.9, 9}, {Op::TranslateY, 0.7, 9}}},
      {{{Op::AutoContrast, 0.9, -1}, {Op::Solarize, 0.8, 3}}},   {{{Op::Equalize, 0.8, -1}, {Op::Invert, 0.1, -1}}},
      {{{Op::TranslateY, 0.7, 9}, {Op::AutoContrast, 0.9, -1}}},
  };
  static const std::vector<SubPolicy> svhn = {
      {{{Op::ShearX, 0.9, 4}, {Op::Invert, 0.2, -1}}},         {{{Op::ShearY, 0.9, 8}, {Op::Invert, 0.7, -1}}},
      {{{Op::Equalize, 0.6, -1}, {Op::Solarize, 0.6, 6}}},     {{{Op::Invert, 0.9, -1}, {Op::Equalize, 0.6, -1}}},
      {{{Op::Equalize, 0.6, -1}, {Op::Rotate, 0.9, 3}}},       {{{Op::ShearX, 0.9, 4}, {Op::AutoContrast, 0.8, -1}}},
      {{{Op::ShearY, 0.9, 8}, {Op::Invert, 0.4, -1}}},         {{{Op::ShearY, 0.9, 5}, {Op::Solarize, 0.2, 6}}},
      {{{Op::Invert, 0.9, -1}, {Op::AutoContrast, 0.8, -1}}},  {{{Op::Equalize, 0.6, -1}, {Op::Rotate, 0.9, 3}}},
      {{{Op::ShearX, 0.9, 4}, {Op::Solarize, 0.3, 3}}},        {{{Op::ShearY, 0.8, 8}, {Op::Invert, 0.7, -1}}},
      {{{Op::Equalize, 0.9, -1}, {Op::TranslateY, 0.6, 6}}},  {{{Op::Invert, 0.9, -1}, {Op::Equalize, 0.6, -1}}},
      {{{Op::Contrast, 0.3, 3}, {Op::Rotate, 0.8, 4}}},        {{{Op::Invert, 0.8, -1}, {Op::TranslateY, 0.0, 2}}},
      {{{Op::ShearY, 0.7, 6}, {Op::Solarize, 0.4, 8}}},        {{{Op::Invert, 0.6, -1}, {Op::Rotate, 0.8, 4}}},
      {{{Op::ShearY, 0.3, 7}, {Op::TranslateX, 0.9, 3}}},      {{{Op::ShearX, 0.1, 6}, {Op::Invert, 0.6, -1}}},
      {{{Op::Solarize, 0.7, 2}, {Op::TranslateY, 0.6, 7}}},    {{{Op::ShearY, 0.8, 4}, {Op::Invert, 0.8, -1}}},
      {{{Op::ShearX, 0.7, 9}, {Op::TranslateY, 0.8, 3}}},      {{{Op::ShearY, 0.8, 5}, {Op::AutoContrast, 0.7, -1}}},
      {{{Op::ShearX, 0.7, 2}, {Op::Invert, 0.1, -1}}},
  };
  switch (policy) {
    case AutoAugmentPolicy::Cifar10:
      return cifar10;
    case AutoAugmentPolicy::Svhn:
      return svhn;
    default:
      return imagenet;
  }
}

// torch.linspace in float32: the first half counted up from start, the second down from end.
std::vector<double> linspace(double start, double end, int steps) {
  const float first = static_cast<float>(start), last = static_cast<float>(end);
  const float step = (last - first) / static_cast<float>(steps - 1);
  std::vector<double> values(steps);
  for (int i = 0; i < steps; ++i) {
    values[i] = i < steps / 2 ? first + step * static_cast<float>(i) : last - step * static_cast<float>(steps - i - 1);
  }
  return values;
}

// Posterize's bits: top - round(arange(steps) / ((steps - 1) / levels)), in float32, halves to even.
std::vector<double> posterize_bits(int top, int levels, int steps) {
  const float divisor = static_cast<float>((steps - 1) / static_cast<double>(levels));
  std::vector<double> values(steps);
  for (int i = 0; i < steps; ++i) values[i] = top - std::nearbyint(static_cast<float>(i) / divisor);
  return values;
}

AugmentRange range(Op op, std::vector<double> magnitudes = {}, bool signed_magnitude = false) {
  return {op, std::move(magnitudes), signed_magnitude};
}

// Gamma(shape, 1) by Marsaglia and Tsang's method (shape < 1 boosted by U^(1/shape)).
double gamma_sample(double shape, SampleRng& rng) {
  if (shape < 1) return gamma_sample(shape + 1, rng) * std::pow(1.0 - rng.uniform(0.0, 1.0), 1.0 / shape);
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  while (true) {
    // A standard normal by Box-Muller.
    const double u1 = 1.0 - rng.uniform(0.0, 1.0), u2 = rng.uniform(0.0, 1.0);
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    const double v = std::pow(1.0 + c * z, 3);
    if (v <= 0) continue;
    const double u = 1.0 - rng.uniform(0.0, 1.0);
    if (std::log(u) < 0.5 * z * z + d - d * v + d * std::log(v)) return d * v;
  }
}

// Dirichlet(alpha, ..., alpha) with n components, as float32 like torch._sample_dirichlet's.
std::vector<float> dirichlet(double alpha, int n, SampleRng& rng) {
  std::vector<double> g(n);
  double total = 0;
  for (auto& v : g) total += (v = gamma_sample(alpha, rng));
  std::vector<float> weights(n);
  for (int i = 0; i < n; ++i) weights[i] = static_cast<float>(g[i] / total);
  return weights;
}

}  // namespace

AutoAugmentPolicy parse_auto_augment_policy(const std::string& name) {
  for (auto policy :
       {AutoAugmentPolicy::ImageNet, AutoAugmentPolicy::Cifar10, AutoAugmentPolicy::Svhn,
        AutoAugmentPolicy::RandAugment, AutoAugmentPolicy::TrivialAugmentWide, AutoAugmentPolicy::AugMix}) {
    if (name == to_string(policy)) return policy;
  }
  throw ConfigError(
      str("unknown auto-augment policy '", name, "'; use imagenet, cifar10, svhn, ra, ta_wide or augmix"));
}

const char* to_string(AutoAugmentPolicy policy) {
  switch (policy) {
    case AutoAugmentPolicy::ImageNet:
      return "imagenet";
    case AutoAugmentPolicy::Cifar10:
      return "cifar10";
    case AutoAugmentPolicy::Svhn:
      return "svhn";
    case AutoAugmentPolicy::RandAugment:
      return "ra";
    case AutoAugmentPolicy::TrivialAugmentWide:
      return "ta_wide";
    case AutoAugmentPolicy::AugMix:
      return "augmix";
  }
  return "?";
}

AutoAugment::AutoAugment(AutoAugmentOptions options) : options_(std::move(options)) {
  const auto& o = options_;
  DPT_CHECK(o.num_magnitude_bins() >= 2, ConfigError, "auto-augment: need at least 2 magnitude bins, got ",
            o.num_magnitude_bins());
  DPT_CHECK(o.magnitude() >= 0 && o.magnitude() < o.num_magnitude_bins(), ConfigError,
            "auto-augment: RandAugment magnitude ", o.magnitude(), " is not one of the ", o.num_magnitude_bins(),
            " bins (0 to ", o.num_magnitude_bins() - 1, ")");
  DPT_CHECK(o.num_ops() >= 0, ConfigError, "auto-augment: RandAugment needs a count of ops >= 0, got ", o.num_ops());
  DPT_CHECK(o.severity() >= 1 && o.severity() <= 10, ConfigError,
            "auto-augment: AugMix severity must lie in [1, 10], got ", o.severity());
  DPT_CHECK(o.mixture_width() >= 1, ConfigError, "auto-augment: AugMix needs at least one chain, got ",
            o.mixture_width());
  DPT_CHECK(o.alpha() > 0, ConfigError, "auto-augment: AugMix alpha must be positive, got ", o.alpha());
}

std::vector<AugmentRange> AutoAugment::augmentation_space(int width, int height) const {
  const int bins = options_.num_magnitude_bins();
  switch (options_.policy()) {
    case AutoAugmentPolicy::ImageNet:
    case AutoAugmentPolicy::Cifar10:
    case AutoAugmentPolicy::Svhn:
    case AutoAugmentPolicy::RandAugment: {
      // AutoAugment's sub-policies index 10 bins; RandAugment adds Identity first and drops Invert.
      const bool random = options_.policy() == AutoAugmentPolicy::RandAugment;
      const int n = random ? bins : 10;
      std::vector<AugmentRange> space;
      if (random) space.push_back(range(Op::Identity));
      for (Op op : {Op::ShearX, Op::ShearY}) space.push_back(range(op, linspace(0.0, 0.3, n), true));
      space.push_back(range(Op::TranslateX, linspace(0.0, 150.0 / 331.0 * width, n), true));
      space.push_back(range(Op::TranslateY, linspace(0.0, 150.0 / 331.0 * height, n), true));
      space.push_back(range(Op::Rotate, linspace(0.0, 30.0, n), true));
      for (Op op : {Op::Brightness, Op::Color, Op::Contrast, Op::Sharpness}) {
        space.push_back(range(op, linspace(0.0, 0.9, n), true));
      }
      space.push_back(range(Op::Posterize, posterize_bits(8, 4, n)));
      space.push_back(range(Op::Solarize, linspace(255.0, 0.0, n)));
      space.push_back(range(Op::AutoContrast));
      space.push_back(range(Op::Equalize));
      if (!random) space.push_back(range(Op::Invert));
      return space;
    }
    case AutoAugmentPolicy::TrivialAugmentWide: {
      std::vector<AugmentRange> space = {range(Op::Identity)};
      for (Op op : {Op::ShearX, Op::ShearY}) space.push_back(range(op, linspace(0.0, 0.99, bins), true));
      for (Op op : {Op::TranslateX, Op::TranslateY}) space.push_back(range(op, linspace(0.0, 32.0, bins), true));
      space.push_back(range(Op::Rotate, linspace(0.0, 135.0, bins), true));
      for (Op op : {Op::Brightness, Op::Color, Op::Contrast, Op::Sharpness}) {
        space.push_back(range(op, linspace(0.0, 0.99, bins), true));
      }
      space.push_back(range(Op::Posterize, posterize_bits(8, 6, bins)));
      space.push_back(range(Op::Solarize, linspace(255.0, 0.0, bins)));
      space.push_back(range(Op::AutoContrast));
      space.push_back(range(Op::Equalize));
      return space;
    }
    case AutoAugmentPolicy::AugMix: {
      constexpr int kParameterMax = 10;
      std::vector<AugmentRange> space;
      for (Op op : {Op::ShearX, Op::ShearY}) space.push_back(range(op, linspace(0.0, 0.3, kParameterMax), true));
      space.push_back(range(Op::TranslateX, linspace(0.0, width / 3.0, kParameterMax), true));
      space.push_back(range(Op::TranslateY, linspace(0.0, height / 3.0, kParameterMax), true));
      space.push_back(range(Op::Rotate, linspace(0.0, 30.0, kParameterMax), true));
      space.push_back(range(Op::Posterize, posterize_bits(4, 4, kParameterMax)));
      space.push_back(range(Op::Solarize, linspace(255.0, 0.0, kParameterMax)));
      space.push_back(range(Op::AutoContrast));
      space.push_back(range(Op::Equalize));
      if (options_.all_ops()) {
        for (Op op : {Op::Brightness, Op::Color, Op::Contrast, Op::Sharpness}) {
          space.push_back(range(op, linspace(0.0, 0.9, kParameterMax), true));
        }
      }
      return space;
    }
  }
  return {};
}

void AutoAugment::apply(Image& image, SampleRng& rng) const {
  switch (options_.policy()) {
    case AutoAugmentPolicy::RandAugment:
      return apply_random(image, rng);
    case AutoAugmentPolicy::TrivialAugmentWide:
      return apply_trivial(image, rng);
    case AutoAugmentPolicy::AugMix:
      return apply_augmix(image, rng);
    default:
      return apply_policy(image, rng);
  }
}

// AutoAugment.forward: one sub-policy at random; each of its two steps runs with its
// probability, its magnitude negated on a coin flip when signed.
void AutoAugment::apply_policy(Image& image, SampleRng& rng) const {
  const auto& table = policy_table(options_.policy());
  const SubPolicy& sub = table[rng.integer(0, static_cast<int64_t>(table.size()) - 1)];
  const std::array<double, 2> probs = {rng.uniform(0.0, 1.0), rng.uniform(0.0, 1.0)};
  const std::array<bool, 2> negative = {rng.integer(0, 1) == 0, rng.integer(0, 1) == 0};
  const auto space = augmentation_space(image.width, image.height);
  for (int i = 0; i < 2; ++i) {
    const PolicyStep& step = sub[i];
    if (!(probs[i] <= step.probability)) continue;
    const auto it = std::find_if(space.begin(), space.end(), [&](const AugmentRange& r) { return r.op == step.op; });
    double magnitude = step.bin >= 0 ? it->magnitudes[step.bin] : 0.0;
    if (it->signed_magnitude && negative[i]) magnitude = -magnitude;
    apply_augment_op(image, step.op, magnitude, options_.interpolation());
  }
}

void AutoAugment::apply_drawn(const std::vector<AugmentRange>& space, std::optional<int> bin, int bins, Image& image,
                              SampleRng& rng) const {
  const AugmentRange& op = space[rng.integer(0, static_cast<int64_t>(space.size()) - 1)];
  double magnitude = 0.0;
  if (!op.magnitudes.empty()) magnitude = op.magnitudes[bin ? *bin : rng.integer(0, bins - 1)];
  if (op.signed_magnitude && rng.integer(0, 1) == 1) magnitude = -magnitude;
  apply_augment_op(image, op.op, magnitude, options_.interpolation());
}

// RandAugment.forward: num_ops ops drawn with replacement, all at the same magnitude bin.
void AutoAugment::apply_random(Image& image, SampleRng& rng) const {
  const auto space = augmentation_space(image.width, image.height);
  for (int i = 0; i < options_.num_ops(); ++i) apply_drawn(space, options_.magnitude(), 0, image, rng);
}

// TrivialAugmentWide.forward: one op, at a magnitude bin drawn uniformly.
void AutoAugment::apply_trivial(Image& image, SampleRng& rng) const {
  apply_drawn(augmentation_space(image.width, image.height), std::nullopt, options_.num_magnitude_bins(), image, rng);
}

// AugMix.forward: mixture_width chains of 1-3 ops (bins below the severity) from the original,
// mixed with Dirichlet weights, then blended with the original by a Beta(alpha, alpha) weight,
// in float32, truncated back to bytes.
void AutoAugment::apply_augmix(Image& image, SampleRng& rng) const {
  const auto& o = options_;
  const auto space = augmentation_space(image.width, image.height);
  const std::vector<float> m = dirichlet(o.alpha(), 2, rng);
  std::vector<float> weights = dirichlet(o.alpha(), o.mixture_width(), rng);
  for (auto& w : weights) w *= m[1];
  thread_local std::vector<float> mix;
  thread_local Image chain;
  mix.resize(image.pixels.size());
  for (size_t i = 0; i < mix.size(); ++i) mix[i] = m[0] * static_cast<float>(image.pixels[i]);
  for (int c = 0; c < o.mixture_width(); ++c) {
    chain = image;
    const int depth = o.chain_depth() > 0 ? o.chain_depth() : static_cast<int>(rng.integer(1, 3));
    for (int d = 0; d < depth; ++d) apply_drawn(space, std::nullopt, o.severity(), chain, rng);
    for (size_t i = 0; i < mix.size(); ++i) mix[i] += weights[c] * static_cast<float>(chain.pixels[i]);
  }
  for (size_t i = 0; i < mix.size(); ++i) image.pixels[i] = static_cast<uint8_t>(std::clamp(mix[i], 0.0f, 255.0f));
}

}  // namespace dpt::data

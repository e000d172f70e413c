#include "dptrain/data/transform.h"

#include "bindings.h"
#include "dptrain/common/error.h"

namespace dpt::python {

namespace {

using Range = std::pair<double, double>;

data::ChannelValues channel_values(const std::vector<float>& values, const char* what) {
  DPT_CHECK(values.size() == 3, ConfigError, "transform: ", what, " needs one value per RGB channel, got ",
            values.size());
  return {values[0], values[1], values[2]};
}

// The options of one automatic augmentation (torchvision's arguments of AutoAugment, RandAugment,
// TrivialAugmentWide and AugMix), or none.
std::optional<data::AutoAugmentOptions> augment_options(const std::optional<std::string>& policy,
                                                        const py::dict& arguments,
                                                        data::Interpolation interpolation) {
  if (!policy) {
    DPT_CHECK(arguments.empty(), ConfigError, "transform: augmentation arguments given without a policy");
    return std::nullopt;
  }
  data::AutoAugmentOptions options;
  options.policy(data::parse_auto_augment_policy(*policy)).interpolation(interpolation);
  for (const auto& [key, value] : arguments) {
    const std::string name = py::cast<std::string>(key);
    if (name == "num_ops") {
      options.num_ops(py::cast<int>(value));
    } else if (name == "magnitude") {
      options.magnitude(py::cast<int>(value));
    } else if (name == "num_magnitude_bins") {
      options.num_magnitude_bins(py::cast<int>(value));
    } else if (name == "severity") {
      options.severity(py::cast<int>(value));
    } else if (name == "mixture_width") {
      options.mixture_width(py::cast<int>(value));
    } else if (name == "chain_depth") {
      options.chain_depth(py::cast<int>(value));
    } else if (name == "alpha") {
      options.alpha(py::cast<double>(value));
    } else if (name == "all_ops") {
      options.all_ops(py::cast<bool>(value));
    } else {
      throw ConfigError(str("transform: unknown augmentation argument '", name,
                            "' (num_ops, magnitude, num_magnitude_bins, severity, mixture_width, chain_depth, "
                            "alpha, all_ops)"));
    }
  }
  return options;
}

data::Transform make_transform(const std::string& mode, int size, int resize, Range scale, Range ratio,
                               const std::string& interpolation, double flip_probability,
                               double erase_probability, const std::optional<std::string>& auto_augment,
                               const py::dict& augment_arguments, const std::vector<float>& mean,
                               const std::vector<float>& std, bool dct_scaling, uint64_t seed) {
  DPT_CHECK(mode == "train" || mode == "eval", ConfigError, "transform: mode is 'train' or 'eval', got '", mode,
            "'");
  const data::Interpolation filter = data::parse_interpolation(interpolation);
  return data::Transform(data::TransformOptions()
                             .mode(mode == "train" ? data::TransformMode::Train : data::TransformMode::Eval)
                             .size(size)
                             .resize(resize)
                             .scale_min(scale.first)
                             .scale_max(scale.second)
                             .ratio_min(ratio.first)
                             .ratio_max(ratio.second)
                             .interpolation(filter)
                             .flip_probability(flip_probability)
                             .erase_probability(erase_probability)
                             .auto_augment(augment_options(auto_augment, augment_arguments, filter))
                             .mean(channel_values(mean, "mean"))
                             .std(channel_values(std, "std"))
                             .dct_scaling(dct_scaling)
                             .seed(seed));
}

// The plan as a dict, for tests that replay it with torchvision's functional transforms.
py::dict plan_dict(const data::CropPlan& plan) {
  py::dict out;
  out["left"] = plan.left;
  out["top"] = plan.top;
  out["width"] = plan.width;
  out["height"] = plan.height;
  out["out_width"] = plan.out_width;
  out["out_height"] = plan.out_height;
  out["window_left"] = plan.window_left;
  out["window_top"] = plan.window_top;
  out["flip"] = plan.flip;
  out["augmented"] = plan.augment.has_value();
  if (plan.erase) {
    out["erase"] = py::make_tuple(plan.erase->top, plan.erase->left, plan.erase->height, plan.erase->width);
  } else {
    out["erase"] = py::none();
  }
  return out;
}

}  // namespace

void bind_transforms(py::module_& module) {
  py::class_<data::Transform>(module, "Transform",
                              "torchvision's ImageNet train or eval pipeline, fused: decode, crop, resize, flip, "
                              "[augment], normalize, [erase], from (seed, epoch, index) alone")
      .def(py::init(&make_transform), py::kw_only(), py::arg("mode"), py::arg("size"), py::arg("resize") = 256,
           py::arg("scale") = Range{0.08, 1.0}, py::arg("ratio") = Range{3.0 / 4.0, 4.0 / 3.0},
           py::arg("interpolation") = "bilinear", py::arg("flip_probability") = 0.0,
           py::arg("erase_probability") = 0.0, py::arg("auto_augment") = py::none(),
           py::arg("augment_arguments") = py::dict(),
           py::arg("mean") = std::vector<float>{0.485f, 0.456f, 0.406f},
           py::arg("std") = std::vector<float>{0.229f, 0.224f, 0.225f}, py::arg("dct_scaling") = true,
           py::arg("seed") = 0)
      .def_property_readonly("sample_shape", &data::Transform::sample_shape)
      .def_property_readonly("mode",
                             [](const data::Transform& t) {
                               return t.options().mode() == data::TransformMode::Train ? "train" : "eval";
                             })
      .def_property_readonly("seed", [](const data::Transform& t) { return t.options().seed(); })
      .def(
          "plan",
          [](const data::Transform& t, int width, int height, int64_t epoch, int64_t index) {
            return plan_dict(t.plan(width, height, epoch, index));
          },
          py::arg("width"), py::arg("height"), py::arg("epoch"), py::arg("index"),
          "Where sample `index` of a width x height image comes from at `epoch`: the crop box, the "
          "resize, the flip, the erased box")
      .def(
          "__call__",
          [](const data::Transform& t, py::bytes encoded, int64_t epoch, int64_t index) {
            const std::string_view view(encoded);
            std::vector<uint8_t> bytes(view.begin(), view.end());
            at::Tensor out = at::empty(t.sample_shape(), at::kFloat);
            {
              py::gil_scoped_release released;
              t.apply_encoded(bytes, "<bytes>", epoch, index, out.data_ptr<float>());
            }
            return out;
          },
          py::arg("encoded"), py::arg("epoch") = 0, py::arg("index") = 0,
          "The transformed float tensor of a JPEG or PNG file's bytes");
}

}  // namespace dpt::python

#pragma once
// How autograd holds its graph's nodes: std::shared_ptr<Node> up to LibTorch 2.13,
// c10::intrusive_ptr<Node> from 2.14 (Node derives from intrusive_ptr_target there). Derived from
// the type of an edge's node, so it follows whatever the installed LibTorch declares.
//
//   dpt::compat::NodePtr node = dpt::compat::make_node<MyBackward>(args...);
//   torch::autograd::create_gradient_edge(output, std::move(node));

#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/function.h>

#include <memory>
#include <type_traits>
#include <utility>

namespace dpt::compat {

using NodePtr = decltype(torch::autograd::Edge::function);

// A new node of type T (a torch::autograd::Node), held as this LibTorch holds nodes.
template <typename T, typename... Args>
NodePtr make_node(Args&&... args) {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<torch::autograd::Node>>) {
    return std::make_shared<T>(std::forward<Args>(args)...);
  } else {
    return c10::make_intrusive<T>(std::forward<Args>(args)...);
  }
}

}  // namespace dpt::compat

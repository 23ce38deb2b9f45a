/// \file
/// Fashion-MNIST (and MNIST, same format) as TensorDatasets: images float32 [N, 1, 28, 28]
/// scaled to [0, 1], labels int64 [N]. By default read from Debian's dataset-fashion-mnist
/// package (/usr/share/datasets/fashion-mnist), or from $STRATA_FASHION_MNIST_DIR.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <strata/data/dataset.hpp>
#include <strata/data/idx.hpp>
#include <strata/support/environment.hpp>

namespace strata::data {

/// The directory datasets are read from when none is given.
inline std::string default_fashion_mnist_dir() {
  if (const char* d = environment::get("STRATA_FASHION_MNIST_DIR")) return d;
  return "/usr/share/datasets/fashion-mnist";
}

namespace detail {

/// `dir/stem`, with ".gz" if only the compressed file exists.
inline std::string locate(const std::string& dir, const std::string& stem) {
  const std::filesystem::path plain = std::filesystem::path(dir) / stem;
  std::error_code ec;
  if (std::filesystem::exists(plain, ec)) return plain.string();
  return plain.string() + ".gz";
}

inline TensorDataset load_idx_pair(const std::string& images_path, const std::string& labels_path) {
  IdxArray img = read_idx(images_path);
  IdxArray lab = read_idx(labels_path);
  if (img.dims.size() != 3)
    STRATA_THROW(::strata::data_error, "strata.data", images_path, ": expected 3 dimensions (count, rows, cols), got ",
                 img.dims.size());
  if (lab.dims.size() != 1)
    STRATA_THROW(::strata::data_error, "strata.data", labels_path, ": expected 1 dimension (count), got ",
                 lab.dims.size());
  if (img.dims[0] != lab.dims[0])
    STRATA_THROW(::strata::data_error, "strata.data", "image/label count mismatch: ", images_path, " has ", img.dims[0],
                 " images, ", labels_path, " has ", lab.dims[0], " labels");
  const std::int64_t n = img.dims[0], h = img.dims[1], w = img.dims[2];
  Tensor x = Tensor::empty({n, 1, h, w}, DType::f32);
  float* xp = x.data<float>();
  for (std::size_t i = 0; i < img.bytes.size(); ++i) xp[i] = static_cast<float>(img.bytes[i]) / 255.0f;
  Tensor y = Tensor::empty({n}, DType::i64);
  std::int64_t* yp = y.data<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) yp[i] = lab.bytes[static_cast<std::size_t>(i)];
  return TensorDataset(x, y);
}

}  // namespace detail

/// The 60,000 training examples.
inline TensorDataset fashion_mnist_train(const std::string& dir = default_fashion_mnist_dir()) {
  return detail::load_idx_pair(detail::locate(dir, "train-images-idx3-ubyte"), detail::locate(dir, "train-labels-idx1-ubyte"));
}
/// The 10,000 test examples.
inline TensorDataset fashion_mnist_test(const std::string& dir = default_fashion_mnist_dir()) {
  return detail::load_idx_pair(detail::locate(dir, "t10k-images-idx3-ubyte"), detail::locate(dir, "t10k-labels-idx1-ubyte"));
}

}  // namespace strata::data

// Checkpoint files: a round trip returns exactly the state; every kind of damage is refused with
// an error that names the problem.
#include "worker/engine/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

namespace hippo::worker {
namespace {

using kernels::Buffer;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("hippo_ckpt_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "state.ckpt").string();
    state_.step = 42;
    state_.data_position = 12345;
    state_.rng_counter = 9;
    state_.optimizer = "adam";
    std::vector<float> params, opt_state;
    for (int i = 0; i < 100; ++i) params.push_back(0.25f * i - 3);
    for (int i = 0; i < 200; ++i) opt_state.push_back(1e-3f * i);
    state_.params = Buffer<float>::from_host(backend_, params.data(), 100);
    state_.opt_state = Buffer<float>::from_host(backend_, opt_state.data(), 200);
    save_checkpoint(path_, state_, kHash);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string bytes() const {
    std::ifstream f(path_, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }
  void write(const std::string& b) const { std::ofstream(path_, std::ios::binary) << b; }
  // The message of the CheckpointError that loading throws ("" if none).
  std::string load_error(uint64_t hash = kHash) const {
    try {
      load_checkpoint(path_, hash, backend_);
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "";
  }

  static constexpr uint64_t kHash = 0xabcdef0123456789ull;
  // Declared before the state, whose buffers it owns the memory of.
  std::shared_ptr<const kernels::Backend> backend_ = kernels::make_cpu_backend(1);
  std::filesystem::path dir_;
  std::string path_;
  TrainState state_;
};

TEST_F(CheckpointTest, RoundTripIsExactAndLeavesNoTemporaryFile) {
  EXPECT_TRUE(load_checkpoint(path_, kHash, backend_) == state_);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), 1);
  TrainState fresh;  // step 0, no optimizer yet
  const float three[] = {1, 2, 3};
  fresh.params = Buffer<float>::from_host(backend_, three, 3);
  save_checkpoint(path_, fresh, kHash);
  EXPECT_TRUE(load_checkpoint(path_, kHash, backend_) == fresh);
}

TEST_F(CheckpointTest, FlippedByteIsRefusedAnywhere) {
  const std::string good = bytes();
  for (size_t at : {size_t{20}, size_t{64}, good.size() / 2, good.size() - 1}) {
    std::string bad = good;
    bad[at] ^= 0x10;
    write(bad);
    EXPECT_NE(load_error().find("checksum"), std::string::npos) << "byte " << at;
  }
}

TEST_F(CheckpointTest, TruncatedFileIsRefused) {
  const std::string good = bytes();
  for (size_t size : {good.size() - 1, good.size() - 4, size_t{70}, size_t{10}}) {
    write(good.substr(0, size));
    const std::string error = load_error();
    EXPECT_TRUE(error.find("truncated") != std::string::npos) << size << ": " << error;
  }
  write(good + "x");
  EXPECT_NE(load_error().find("size mismatch"), std::string::npos);
}

TEST_F(CheckpointTest, WrongConfigHashIsRefused) {
  EXPECT_NE(load_error(kHash + 1).find("config hash"), std::string::npos);
}

TEST_F(CheckpointTest, WrongMagicVersionOrMissingFileIsRefused) {
  std::string bad = bytes();
  bad[0] = 'X';
  write(bad);
  EXPECT_NE(load_error().find("wrong magic"), std::string::npos);
  bad = bytes();
  bad[0] = 'H';
  bad[8] = 2;  // version
  write(bad);
  EXPECT_NE(load_error().find("version 2"), std::string::npos);
  std::filesystem::remove(path_);
  EXPECT_NE(load_error().find("cannot open"), std::string::npos);
  EXPECT_THROW(save_checkpoint((dir_ / "no" / "such" / "dir").string(), state_, kHash),
               CheckpointError);
}

}  // namespace
}  // namespace hippo::worker

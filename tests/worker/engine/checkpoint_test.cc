// Checkpoint files: a round trip returns exactly the state; every kind of damage, every field that
// is not the run's (with a valid checksum), and every file that is not a regular file is refused
// with an error that names the problem; writing never follows nor replaces what is already there.
#include "worker/engine/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "protocol/content_hash.h"

namespace hippo::worker {
namespace {

namespace fs = std::filesystem;
using kernels::Buffer;

// A shape with only these sizes set.
CheckpointShape sized(int64_t params, int64_t opt_state) {
  CheckpointShape s;
  s.param_count = params;
  s.opt_state_count = opt_state;
  return s;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hippo_ckpt_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
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
    shape_ = {.config_hash = kHash,
              .step = 42,
              .data_position = 12345,
              .rng_counter = 9,
              .optimizer = "adam",
              .param_count = 100,
              .opt_state_count = 200};
    content_hash_ = save_checkpoint(path_, state_, kHash);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string bytes() const { return read_file(path_); }
  static std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }
  void write(const std::string& b) const { std::ofstream(path_, std::ios::binary) << b; }
  // The file with the header field at `offset` replaced and the checksum recomputed: what a forger
  // (or a bug) writes, which the CRC cannot tell from a good file.
  template <typename T>
  void write_with_field(size_t offset, T value) const {
    std::string b = bytes();
    std::memcpy(b.data() + offset, &value, sizeof value);
    const uint32_t c = static_cast<uint32_t>(
        crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(b.data()), b.size() - 4));
    std::memcpy(b.data() + b.size() - 4, &c, 4);
    write(b);
  }
  // The message of the CheckpointError that loading throws ("" if none).
  std::string load_error(const CheckpointShape& shape) const {
    try {
      load_checkpoint(path_, shape, backend_);
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "";
  }
  std::string load_error() const { return load_error(shape_); }

  static constexpr uint64_t kHash = 0xabcdef0123456789ull;
  // Declared before the state, whose buffers it owns the memory of.
  std::shared_ptr<const kernels::Backend> backend_ = kernels::make_cpu_backend(1);
  fs::path dir_;
  std::string path_;
  TrainState state_;
  CheckpointShape shape_;
  std::string content_hash_;  // what the writer returned
};

// Issue 29: the writer's content hash is the file's (BLAKE2b-256 of its bytes), a load given it
// accepts the file, and a file forged with zeroed parameters and a recomputed CRC, which every
// field check and the CRC accept, is refused by it, naming the file and both hashes; the hash of
// the file on disk (an external trainer's) is the same one.
TEST_F(CheckpointTest, ContentHashFindsWhatTheCrcCannot) {
  EXPECT_EQ(content_hash_, protocol::content_hash(bytes()));
  EXPECT_EQ(file_content_hash(path_), content_hash_);
  EXPECT_TRUE(load_checkpoint(path_, shape_, backend_, content_hash_) == state_);
  EXPECT_NO_THROW(check_file_content_hash(path_, content_hash_));

  std::string b = bytes();
  std::memset(b.data() + 64, 0, 4 * 100);  // the parameters
  const uint32_t c = static_cast<uint32_t>(
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(b.data()), b.size() - 4));
  std::memcpy(b.data() + b.size() - 4, &c, 4);
  write(b);
  EXPECT_EQ(load_error(), "") << "the CRC and every field pass";
  try {
    load_checkpoint(path_, shape_, backend_, content_hash_);
    ADD_FAILURE() << "a forged file loaded";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(path_), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("content hash " + protocol::content_hash(b)),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(content_hash_), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_file_content_hash(path_, content_hash_), CheckpointError);
  EXPECT_THROW(check_content_hash(b, content_hash_, "fetched"), CheckpointError);
  EXPECT_NO_THROW(check_content_hash(b, "", "fetched"));  // unknown: not compared
}

TEST_F(CheckpointTest, RoundTripIsExactAndLeavesNoTemporaryFile) {
  EXPECT_TRUE(load_checkpoint(path_, shape_, backend_) == state_);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), {}), 1);
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(path_)), shape_.file_bytes());
  TrainState fresh;  // step 0, no optimizer yet
  const float three[] = {1, 2, 3};
  fresh.params = Buffer<float>::from_host(backend_, three, 3);
  const std::string other = (dir_ / "fresh.ckpt").string();
  save_checkpoint(other, fresh, kHash);
  CheckpointShape fresh_shape = sized(3, 0);
  fresh_shape.config_hash = kHash;
  EXPECT_TRUE(load_checkpoint(other, fresh_shape, backend_) == fresh);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), {}), 2);
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

TEST_F(CheckpointTest, TruncatedOrExtendedFileIsRefusedBeforeReading) {
  const std::string good = bytes();
  for (size_t size : {good.size() - 1, good.size() - 4, size_t{70}, size_t{10}, size_t{0}}) {
    write(good.substr(0, size));
    const std::string error = load_error();
    EXPECT_TRUE(error.find("truncated") != std::string::npos) << size << ": " << error;
  }
  write(good + "x");
  EXPECT_NE(load_error().find("size mismatch"), std::string::npos);
  // A sparse file of 1 TiB: refused from its size, without reading or allocating it.
  write(good);
  ASSERT_EQ(::truncate(path_.c_str(), int64_t{1} << 40), 0);
  const auto started = std::chrono::steady_clock::now();
  EXPECT_NE(load_error().find("size mismatch: 1099511627776 bytes"), std::string::npos)
      << load_error();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(1));
}

TEST_F(CheckpointTest, WrongConfigHashIsRefused) {
  CheckpointShape other = shape_;
  other.config_hash = kHash + 1;
  EXPECT_NE(load_error(other).find("config hash"), std::string::npos);
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
  fs::remove(path_);
  EXPECT_NE(load_error().find("missing"), std::string::npos);
  EXPECT_THROW(save_checkpoint((dir_ / "no" / "such" / "dir").string(), state_, kHash),
               CheckpointError);
}

// Each header field set to a value the run does not hold at that step, with a recomputed CRC: the
// file is refused with the field's name (before, a negative data_position was accepted and sent
// the data loader out of bounds).
TEST_F(CheckpointTest, EveryFieldIsCheckedAgainstTheRun) {
  const std::string good = bytes();
  struct Case {
    size_t offset;
    int64_t value;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {16, 41, "step 41"},
      {16, -1, "step -1"},
      {16, INT64_MAX, "step 9223372036854775807"},
      {24, -1, "data_position -1"},
      {24, INT64_MIN, "data_position -9223372036854775808"},
      {24, 12346, "data_position 12346"},
      {24, INT64_MAX, "data_position 9223372036854775807"},
      {32, 0, "rng_counter 0"},
      {32, -1, "rng_counter 18446744073709551615"},
  };
  for (const Case& c : cases) {
    write(good);
    write_with_field(c.offset, c.value);
    const std::string error = load_error();
    EXPECT_NE(error.find(c.expected), std::string::npos) << c.expected << ": " << error;
    EXPECT_NE(error.find("not written by this run"), std::string::npos) << error;
  }
  write(good);
  write_with_field(12, uint32_t{1});  // sgd instead of adam
  EXPECT_NE(load_error().find("optimizer \"sgd\""), std::string::npos) << load_error();
  write(good);
  write_with_field(12, uint32_t{7});
  EXPECT_NE(load_error().find("unknown optimizer code 7"), std::string::npos);
  // Sizes that still add up to the file (150 + 150 = 100 + 200), but not the model's.
  write(good);
  write_with_field(48, uint64_t{150});
  write_with_field(56, uint64_t{150});
  EXPECT_NE(load_error().find("150 parameters and 150 optimizer values, the model has 100"),
            std::string::npos)
      << load_error();
  // And the same good file against a run that is elsewhere.
  write(good);
  CheckpointShape later = shape_;
  later.data_position += 64;
  EXPECT_NE(load_error(later).find("end at 12409"), std::string::npos);
  later = shape_;
  later.param_count = 300;
  later.opt_state_count = 0;  // the same file size
  EXPECT_NE(load_error(later).find("the model has 300"), std::string::npos);
  EXPECT_EQ(load_error(), "");
}

// A FIFO, a device and a directory at the checkpoint's name, and symlinks (to /dev/zero, to a
// good checkpoint): refused at once, never read, never blocking.
TEST_F(CheckpointTest, OnlyARegularFileIsRead) {
  const std::string good = (dir_ / "good.ckpt").string();
  fs::rename(path_, good);
  ASSERT_EQ(::mkfifo(path_.c_str(), 0600), 0);
  const auto started = std::chrono::steady_clock::now();
  EXPECT_NE(load_error().find("is a FIFO, not a regular file"), std::string::npos) << load_error();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(1));
  fs::remove(path_);
  fs::create_symlink("/dev/zero", path_);
  EXPECT_NE(load_error().find("is a symbolic link"), std::string::npos) << load_error();
  fs::remove(path_);
  fs::create_symlink(good, path_);
  EXPECT_NE(load_error().find("is a symbolic link"), std::string::npos);
  fs::remove(path_);
  fs::create_directory(path_);
  EXPECT_NE(load_error().find("is a directory"), std::string::npos);
  EXPECT_THROW(checked_file_size("/dev/zero"), CheckpointError);
  EXPECT_EQ(checked_file_size(good), shape_.file_bytes());
}

// Someone who can write in the checkpoint directory plants symlinks to a victim file: at the
// target's name, and at the temporary name the writer used to take (<name>.tmp.<pid>). The
// victim is never written, the symlinks stay as they were, and no temporary file is left.
TEST_F(CheckpointTest, WritingNeverFollowsNorReplaces) {
  const std::string victim = (dir_ / "victim").string();
  std::ofstream(victim) << "precious";
  const std::string target = (dir_ / "next.ckpt").string();
  fs::create_symlink(victim, target + ".tmp." + std::to_string(::getpid()));
  fs::create_symlink(victim, target);
  EXPECT_THROW(
      {
        try {
          save_checkpoint(target, state_, kHash);
        } catch (const CheckpointError& e) {
          EXPECT_NE(std::string(e.what()).find("exists already"), std::string::npos) << e.what();
          throw;
        }
      },
      CheckpointError);
  EXPECT_EQ(read_file(victim), "precious");
  EXPECT_TRUE(fs::is_symlink(target));
  // Without the planted target, the write goes to a fresh name and leaves the old one alone.
  fs::remove(target);
  save_checkpoint(target, state_, kHash);
  EXPECT_EQ(read_file(victim), "precious");
  EXPECT_FALSE(fs::is_symlink(target));
  EXPECT_TRUE(fs::is_symlink(target + ".tmp." + std::to_string(::getpid())));
  EXPECT_TRUE(load_checkpoint(target, shape_, backend_) == state_);
  // An existing checkpoint is never replaced, not even by another good one.
  const std::string before = bytes();
  TrainState changed = state_;
  changed.rng_counter = 10;
  EXPECT_THROW(save_checkpoint(path_, changed, kHash), CheckpointError);
  EXPECT_EQ(bytes(), before);
  // Nothing but the four names above (state, victim, next, the planted temporary name).
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), {}), 4);
}

TEST(CheckpointShapeTest, FileSizeNeverOverflows) {
  EXPECT_EQ(sized(100, 200).file_bytes(), 1268);
  EXPECT_EQ(sized(-1, 0).file_bytes(), -1);
  EXPECT_EQ(sized(INT64_MAX / 4, 0).file_bytes(), -1);
  EXPECT_EQ(sized(INT64_MAX / 8, INT64_MAX / 8).file_bytes(), -1);
}

}  // namespace
}  // namespace hippo::worker

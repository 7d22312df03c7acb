// Identities and their roles (protocol/trust.h), the --authorized directory's role
// subdirectories and the operator's local key (protocol/auth.h), without sockets.
#include "protocol/trust.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "protocol/auth.h"

namespace hippo::protocol {
namespace {

namespace fs = std::filesystem;

TEST(Trust, AUserIdCarriesKeyRolesAndName) {
  PeerIdentity peer{"rq:7i-Ab.=+^!/*?&<>()[]{}@%$#0123456789abc", kWorkerRole, "worker one"};
  EXPECT_EQ(from_user_id(to_user_id(peer)), peer);  // Z85 has ':' and '.', never a space
  PeerIdentity anonymous = from_user_id("");
  EXPECT_TRUE(anonymous.anonymous());
  EXPECT_EQ(anonymous.roles, kAllRoles);
  for (const char* bad : {"garbage", "x key name", "3 ", "3  name"})
    EXPECT_EQ(from_user_id(bad).roles, 0u) << bad;
}

TEST(Trust, ExecKindsAreNamed) {
  EXPECT_EQ(parse_exec_kinds("searcher"), (ExecKinds{true, false}));
  EXPECT_EQ(parse_exec_kinds("trainer,searcher"), (ExecKinds{true, true}));
  for (const char* bad : {"", "all", "searcher,", "trainer;searcher"})
    EXPECT_THROW(parse_exec_kinds(bad), std::invalid_argument) << bad;
  EXPECT_EQ(to_string(ExecKinds{true, true}), "searcher,trainer");
}

class Keys : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("hippo-keys-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void pub(const std::string& where, const std::string& key) {
    fs::create_directories((dir_ / where).parent_path());
    std::ofstream(dir_ / where) << key << "\n";
  }
  fs::path dir_;
};

TEST_F(Keys, AuthorizedKeysHaveTheRolesOfTheirDirectories) {
  const std::string w = generate_key_pair().public_key, c = generate_key_pair().public_key,
                    a = generate_key_pair().public_key;
  pub("workers/w.pub", w);
  pub("clients/c.pub", c);
  pub("admins/a.pub", a);
  pub("workers/a.pub", a);  // an admin that is also a worker
  pub("clients/notes.txt", "not a key file");
  std::vector<PeerIdentity> keys = read_authorized_keys(dir_.string());
  ASSERT_EQ(keys.size(), 3u);
  EXPECT_EQ(keys[0], (PeerIdentity{a, kWorkerRole | kClientRole | kAdminRole, "a"}));
  EXPECT_EQ(keys[1], (PeerIdentity{c, kClientRole, "c"}));
  EXPECT_EQ(keys[2], (PeerIdentity{w, kWorkerRole, "w"}));
  pub("old.pub", w);  // a key without a role directory
  try {
    read_authorized_keys(dir_.string());
    ADD_FAILURE() << "a key without a role was accepted";
  } catch (const AuthError& e) {
    EXPECT_NE(std::string(e.what()).find("has no role"), std::string::npos) << e.what();
  }
}

TEST_F(Keys, TheLocalKeyIsMadeOnceAndOnlyThisUsers) {
  const std::string home = (dir_ / "home").string();
  setenv("HIPPO_HOME", home.c_str(), 1);
  KeyPair first = local_key_pair();
  EXPECT_EQ(local_key_pair().secret_key, first.secret_key);
  struct stat st;
  ASSERT_EQ(stat(home.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(stat((home + "/local.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ClientKeys keys = resolve_client_keys("", "", false, "--master-key", "--key");
  EXPECT_EQ(keys.source, ClientKeys::Source::kLocal);
  EXPECT_EQ(keys.master_public_key, first.public_key);
  EXPECT_EQ(resolve_client_keys("", "", true, "--master-key", "--key").source,
            ClientKeys::Source::kNone);
  // A directory or key that others may read is refused: someone could have planted it.
  chmod(home.c_str(), 0755);
  EXPECT_THROW(local_key_pair(), AuthError);
  chmod(home.c_str(), 0700);
  chmod((home + "/local.key").c_str(), 0644);
  EXPECT_THROW(local_key_pair(), AuthError);
  unsetenv("HIPPO_HOME");
}

}  // namespace
}  // namespace hippo::protocol

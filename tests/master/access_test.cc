// Who may do what on a master (master/access.h, the worker pool's bindings and claims): pure
// decisions, without sockets.
#include "master/access.h"

#include <gtest/gtest.h>

#include "master/worker_pool.h"
#include "searchers/field.h"

namespace hippo::master {
namespace {

using protocol::PeerIdentity;

const PeerIdentity kAlice{"alice-key", protocol::kClientRole, "alice"};
const PeerIdentity kBob{"bob-key", protocol::kClientRole, "bob"};
const PeerIdentity kRoot{"root-key", protocol::kClientRole | protocol::kAdminRole, "root"};
const PeerIdentity kAnonymous = protocol::from_user_id("");  // --insecure: every role

TEST(Access, OnlyTheOwnerOrAnAdminCancels) {
  EXPECT_TRUE(may_cancel(kAlice, "alice-key"));
  EXPECT_FALSE(may_cancel(kBob, "alice-key"));
  EXPECT_TRUE(may_cancel(kRoot, "alice-key"));
  EXPECT_FALSE(may_cancel(kAlice, ""));  // started in-process (`hippo run`): admins only
  EXPECT_TRUE(may_cancel(kAnonymous, "alice-key"));
  EXPECT_FALSE(may_cancel(PeerIdentity{"", protocol::kClientRole, ""}, ""));
}

TEST(Access, CommandsNeedTheirKind) {
  StudySpec spec;
  spec.model = {{"type", "mlp"}};
  spec.searcher.name = "grid";
  EXPECT_NO_THROW(check_commands(spec, {}));
  spec.searcher.name = "external";
  EXPECT_THROW(check_commands(spec, {}), SpecError);
  EXPECT_THROW(check_commands(spec, {.searcher = false, .trainer = true}), SpecError);
  EXPECT_NO_THROW(check_commands(spec, {.searcher = true, .trainer = false}));
  spec.searcher.name = "grid";
  spec.model = {{"type", "external"}};
  try {
    check_commands(spec, {.searcher = true, .trainer = false});
    ADD_FAILURE() << "an external trainer was accepted";
  } catch (const SpecError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("model.command: ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("--allow-exec trainer"), std::string::npos);
  }
}

protocol::Hello hello(const std::string& name) {
  protocol::Hello h;
  h.name = name;
  h.device = "cpu";
  return h;
}

TEST(WorkerPool, ANameBelongsToItsKey) {
  const PeerIdentity w1{"k1", protocol::kWorkerRole, "w1"}, w2{"k2", protocol::kWorkerRole, "w2"};
  WorkerPool pool;
  pool.join("peer-a", w1, hello("w1"));
  RunningJob job;
  job.representative = 0;
  pool.start(*pool.find("peer-a"), job);
  // Another key may not take the name; the same key (a reconnection) may, and the old
  // connection's job is dropped.
  EXPECT_THROW(pool.join("peer-b", w2, hello("w1")), protocol::ProtocolError);
  EXPECT_EQ(pool.size(), 1);
  EXPECT_EQ(pool.jobs().size(), 1u);
  pool.join("peer-c", w1, hello("w1"));
  EXPECT_EQ(pool.size(), 1);
  EXPECT_EQ(pool.find("peer-a"), nullptr);
  EXPECT_TRUE(pool.jobs().empty());
  pool.join("peer-b", w2, hello("w2"));
  EXPECT_EQ(pool.keys(), 2u);
}

TEST(Claims, OneKeyIsBelievedOnlyWhenItIsTheOnlyOne) {
  Claims claims;
  EXPECT_TRUE(claims.add(7, "k1", 1));  // the only key connected (the operator's own workers)
  EXPECT_FALSE(claims.add(7, "k1", 2));
  EXPECT_TRUE(claims.made_by(7, "k1"));
  EXPECT_FALSE(claims.add(7, "k1", 2));  // the same key again counts once
  EXPECT_TRUE(claims.add(7, "k2", 2));   // a second key: believed, and forgotten
  EXPECT_FALSE(claims.made_by(7, "k1"));
  EXPECT_FALSE(claims.add(8, "k1", 3));
  claims.clear(8);
  EXPECT_FALSE(claims.made_by(8, "k1"));
}

TEST(WorkerPool, AStageAvoidsTheKeyThatClaimedItWhileAnotherCanTry) {
  WorkerPool pool;
  pool.join("a", {"k1", protocol::kWorkerRole, "a"}, hello("a"));
  pool.join("b", {"k1", protocol::kWorkerRole, "b"}, hello("b"));
  pool.join("c", {"k2", protocol::kWorkerRole, "c"}, hello("c"));
  EXPECT_FALSE(pool.claims().add(5, "k1", pool.keys()));
  EXPECT_TRUE(pool.should_avoid(5, *pool.find("a")));
  EXPECT_TRUE(pool.should_avoid(5, *pool.find("b")));  // the same key: the same claim
  EXPECT_FALSE(pool.should_avoid(5, *pool.find("c")));
  EXPECT_FALSE(pool.should_avoid(6, *pool.find("a")));
}

}  // namespace
}  // namespace hippo::master

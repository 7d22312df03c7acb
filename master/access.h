// What this master lets each peer do (README, Security): pure rules that the front applies before
// a handler acts. Roles are protocol/trust.h's: a worker's messages need the worker role, a
// client's requests the client role (the front checks PeerIdentity::has); the rest is here.
#pragma once

#include <string>

#include "protocol/trust.h"
#include "searchers/spec.h"

namespace hippo::master {

// Whether `peer` may cancel a study that `owner` submitted (the owner's key; "" for a study that
// `hippo run` started in-process or an anonymous peer submitted): its owner, or an admin.
bool may_cancel(const protocol::PeerIdentity& peer, const std::string& owner);
// Who may drain a worker (an operator's act on the whole cluster): an admin.
bool may_drain(const protocol::PeerIdentity& peer);

// Throws SpecError naming the field when the spec names a command of a kind this master was not
// allowed to run or relay (--allow-exec): an external searcher (the master runs it) or an
// external trainer (its workers run it, each only with its own --allow-exec trainer).
void check_commands(const StudySpec& spec, const protocol::ExecKinds& allowed);

}  // namespace hippo::master

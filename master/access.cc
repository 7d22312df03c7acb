#include "master/access.h"

#include "searchers/field.h"

namespace hippo::master {

bool may_cancel(const protocol::PeerIdentity& peer, const std::string& owner) {
  return peer.has(protocol::kAdminRole) || (!peer.anonymous() && peer.key == owner);
}

bool may_drain(const protocol::PeerIdentity& peer) {
  return peer.has(protocol::kAdminRole);
}

void check_commands(const StudySpec& spec, const protocol::ExecKinds& allowed) {
  if (spec.searcher.name == "external" && !allowed.searcher)
    throw SpecError(
        "searcher.command: this master runs no external searcher commands (a spec's command "
        "runs only where its operator allowed it: start the master with --allow-exec searcher)");
  if (spec.external_model() && !allowed.trainer)
    throw SpecError(
        "model.command: this master relays no external trainer commands to its workers (a "
        "spec's command runs only where its operator allowed it: start the master with "
        "--allow-exec trainer, and the workers that may run it with --allow-exec trainer)");
}

}  // namespace hippo::master

// `hippo keygen NAME`: a CURVE key pair for a master, a worker or a client (protocol/auth.h), and
// the client side's keys: --master-key / --key, --insecure, or the operator's local key.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "master/cli/cli.h"

namespace hippo::cli {
namespace {

int keygen(const std::string& name, const GlobalOptions& global) {
  protocol::KeyPair keys = protocol::generate_key_pair();
  try {
    protocol::write_key_pair(name, keys);
  } catch (const protocol::AuthError& e) {
    throw BadInput(e.what());
  }
  if (global.format == Format::kJson) {
    std::printf("%s\n", nlohmann::json{{"secret_key_file", name + ".key"},
                                       {"public_key_file", name + ".pub"},
                                       {"public_key", keys.public_key}}
                            .dump()
                            .c_str());
  } else {
    std::printf(
        "wrote %s.key (secret, mode 0600: keep it on its machine) and %s.pub (public: "
        "copy it into workers/, clients/ or admins/ of the master's --authorized directory, or "
        "to the workers and clients if this is the master's)\n",
        name.c_str(), name.c_str());
  }
  return 0;
}

}  // namespace

protocol::ClientKeys client_keys(const GlobalOptions& global) {
  try {
    return protocol::resolve_client_keys(global.master_key, global.key, global.insecure,
                                         "--master-key ($HIPPO_MASTER_KEY)", "--key ($HIPPO_KEY)");
  } catch (const protocol::AuthError& e) {
    throw BadInput(e.what());
  }
}

void add_key_commands(CLI::App& app, const GlobalOptions& global, Action* action) {
  CLI::App* cmd = app.add_subcommand(
      "keygen", "write a CURVE key pair NAME.key (secret) and NAME.pub (public) for --auth");
  cmd->fallthrough();
  auto name = std::make_shared<std::string>();
  cmd->add_option("name", *name, "file name without extension (may include a directory)")
      ->required();
  set_action(cmd, action, kTableOrJson, [name, &global] { return keygen(*name, global); });
}

}  // namespace hippo::cli

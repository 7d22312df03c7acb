// The second process of the storage tests.
//   storage_probe dump FILE   prints the canonical dump of the stage tree stored in FILE
//   storage_probe hold FILE   opens a write transaction on FILE (a study named "held"), prints
//                             "holding" and waits, holding the write lock, until it is killed
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>

#include "storage/plan.h"
#include "tests/storage/tree_dump.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: storage_probe dump|hold FILE\n");
    return 2;
  }
  try {
    auto plan = hippo::SearchPlan::open(argv[2]);
    if (std::strcmp(argv[1], "dump") == 0) {
      std::fputs(hippo::dump_tree(plan.load_tree()).c_str(), stdout);
      return 0;
    }
    if (std::strcmp(argv[1], "hold") == 0) {
      plan.transaction([&] {
        int64_t id = plan.create_study("held", {{"name", "held"}}, hippo::Policy::kShared);
        plan.add_event(id, "created", {});
        std::puts("holding");
        std::fflush(stdout);
        for (;;) pause();
      });
    }
    std::fprintf(stderr, "unknown command %s\n", argv[1]);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

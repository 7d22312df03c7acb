// A CUDA library (cuBLAS, cuDNN) opened at run time rather than linked: their libraries take
// ~0.15 s and ~200 MB each to load, which every CPU-only process (the master, CPU workers, tests)
// would otherwise pay. The library stays loaded for the life of the process.
#pragma once

#include <dlfcn.h>

#include <stdexcept>
#include <string>
#include <type_traits>

namespace hippo::kernels::cuda {

class RuntimeLibrary {
 public:
  // Opens lib<name>.so.<major> (e.g. "cublas", 13), or throws naming it and `purpose`.
  RuntimeLibrary(const std::string& name, int major, const std::string& purpose)
      : file_("lib" + name + ".so." + std::to_string(major)), major_(major) {
    handle_ = dlopen(file_.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr)
      throw std::runtime_error("cannot load " + file_ + " (" + purpose + "): " + dlerror());
  }

  // Sets fn to the library's exported `symbol`, or throws (a library older than the headers).
  template <typename Fn>
  void load(Fn& fn, const char* symbol) const {
    fn = reinterpret_cast<Fn>(dlsym(handle_, symbol));
    if (fn == nullptr)
      throw std::runtime_error(file_ + " has no " + symbol + " (a version older than " +
                               std::to_string(major_) + ".x?)");
  }

 private:
  std::string file_;
  int major_;
  void* handle_ = nullptr;
};

}  // namespace hippo::kernels::cuda

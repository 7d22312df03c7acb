// OpenBLAS 0.3.21 (Debian 12) does not recognize the CPUs of many virtual machines (their model
// numbers are hidden) and falls back to its Prescott kernels, several times slower than the AVX2
// or AVX-512 ones the CPU supports. OpenBLAS reads OPENBLAS_CORETYPE once, when it is loaded
// (before main), so a program that wants the right kernels must have it in its environment from
// the start: call use_native_blas_kernels first thing in main.
#pragma once

namespace hippo::kernels {

// The OPENBLAS_CORETYPE for this CPU ("SkylakeX" with AVX-512, "Haswell" with AVX2), or nullptr.
const char* native_blas_core_type();

// If OPENBLAS_CORETYPE is unset and this CPU has a better core type than OpenBLAS may detect,
// sets it and executes this program again with the same arguments (so the value is read at
// load time). Returns normally when nothing needs to change. Results depend on the core type
// bit for bit (kernels.h), and an explicit OPENBLAS_CORETYPE is always respected.
void use_native_blas_kernels(char** argv);

}  // namespace hippo::kernels

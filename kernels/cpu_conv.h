// Direct convolutions of the CPU backend (kernels.h's ConvShape: stride 1, a square kernel, zero
// padding; CNHW activations), one implementation (cpu_conv_impl.h) compiled for each instruction
// set like the product (cpu_gemm.h). No column matrix: a register tile of output positions x
// output channels reads the zero-padded input directly (positions within one row: consecutive
// addresses), and the weights packed by channel blocks.
//
// Bits. Each output value is one chain of fused multiply-adds from 0, in the order stated below,
// whatever the instruction set, tile or thread: the same bits as the product of the weights and
// the im2col columns would give (cpu_gemm.h), and the same on every instruction set
// (tests/kernels/cpu_gemm_test.cc checks both).
#pragma once

#include <cstdint>

#include "kernels/cpu_gemm.h"
#include "kernels/kernels.h"

namespace hippo::kernels::cpu {

// Floats of the packed weights of shape s (for any instruction set).
int64_t conv_packed_weights_size(const ConvShape& s);
// packed = w[Cout, Cin*k*k] in the layout conv_forward of `isa` reads.
void conv_pack_weights(Isa isa, const ConvShape& s, const float* w, float* packed);

// Floats of the work buffer that conv_forward and conv_weight_grad need for nb images.
int64_t conv_work_size(const ConvShape& s, int nb);

// For the images [b0, b0 + nb) of the batch, on the calling thread:
//   y[co, b, oy, ox] = sum over r = (c, ki, kj) ascending of
//                      w[co, r] x[c, b, oy + ki - pad, ox + kj - pad]   (+ bias[co] if bias)
// (x outside the image is 0), from the weights packed by conv_pack_weights for the same isa.
void conv_forward(Isa isa, const ConvShape& s, const float* x, const float* packed,
                  const float* bias, float* y, int b0, int nb, float* work);

// The weight gradient's rows [r0, r1) of r = (c, ki, kj), for the images [b0, b0 + nb), added to
// acc[r - r0, co] (rows kConvAccWidth floats apart), continuing each chain:
//   acc[r, co] = fma(dy[co, b, oy, ox], x[c, b, oy + ki - pad, ox + kj - pad], acc[r, co])
// over the positions (b, oy, ox) ascending. Start from acc = 0 and call for the batch's image
// chunks in order: dw[co, r] = acc[r, co] is then the sum over the whole batch.
void conv_weight_grad(Isa isa, const ConvShape& s, const float* x, const float* dy, float* acc,
                      int r0, int r1, int b0, int nb, float* work);
// Rows of acc: Cout rounded up to a multiple of this. acc needs kConvAccSlackRows more rows.
int64_t conv_acc_width(const ConvShape& s);
inline constexpr int kConvAccSlackRows = 16;

// The per-instruction-set implementations (cpu_<isa>.cc) that the functions above dispatch to.
void conv_pack_weights_portable(const ConvShape& s, const float* w, float* packed);
void conv_pack_weights_avx2(const ConvShape& s, const float* w, float* packed);
void conv_pack_weights_avx512(const ConvShape& s, const float* w, float* packed);
void conv_forward_portable(const ConvShape& s, const float* x, const float* packed,
                           const float* bias, float* y, int b0, int nb, float* work);
void conv_forward_avx2(const ConvShape& s, const float* x, const float* packed, const float* bias,
                       float* y, int b0, int nb, float* work);
void conv_forward_avx512(const ConvShape& s, const float* x, const float* packed, const float* bias,
                         float* y, int b0, int nb, float* work);
void conv_weight_grad_portable(const ConvShape& s, const float* x, const float* dy, float* acc,
                               int r0, int r1, int b0, int nb, float* work);
void conv_weight_grad_avx2(const ConvShape& s, const float* x, const float* dy, float* acc, int r0,
                           int r1, int b0, int nb, float* work);
void conv_weight_grad_avx512(const ConvShape& s, const float* x, const float* dy, float* acc,
                             int r0, int r1, int b0, int nb, float* work);

}  // namespace hippo::kernels::cpu

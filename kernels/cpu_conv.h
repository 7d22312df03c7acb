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

// A chunk of images of a CNHW tensor [C, batch, ...]: the images [first, first + nb) (nb given
// with it). Element 0 of image b of the chunk in channel c is at(c, b, plane) (plane: the floats
// of one image of one channel).
template <typename T>
struct Chunk {
  T* p;
  int batch, first;
  T* at(int64_t c, int64_t b, int64_t plane) const { return p + (c * batch + first + b) * plane; }
};

// Floats of the packed weights of shape s (for any instruction set).
int64_t conv_packed_weights_size(const ConvShape& s);
// packed = w[Cout, Cin*k*k] in the layout conv_forward of `isa` reads.
void conv_pack_weights(Isa isa, const ConvShape& s, const float* w, float* packed);

// Floats of the work buffer that the functions below need for nb images.
int64_t conv_work_size(const ConvShape& s, int nb);

// For the nb images of the chunk x, on the calling thread (s gives the shape; its batch is not
// used), into the same images of the chunk y:
//   y[co, b, oy, ox] = sum over r = (c, ki, kj) ascending of
//                      w[co, r] x[c, b, oy + ki - pad, ox + kj - pad]   (+ bias[co] if bias)
// (x outside the image is 0), from the weights packed by conv_pack_weights for the same isa.
void conv_forward(Isa isa, const ConvShape& s, Chunk<const float> x, const float* packed,
                  const float* bias, Chunk<float> y, int nb, float* work);
// The same convolution (without bias), then: y[co, b, py, px] = relu(the maximum of window
// (py, px) + bias[co]) over 2 x 2 windows with stride 2 (a last odd row or column dropped), and
// codes[co, b, py, px] (bytes, indexed as y) = the position of the window's first maximum in
// row-major order (0..3). bias is required. The convolution's output is never stored.
void conv_pool_forward(Isa isa, const ConvShape& s, Chunk<const float> x, const float* packed,
                       const float* bias, Chunk<float> y, Chunk<uint8_t> codes, int nb,
                       float* work);

// The weight gradient's rows [r0, r1) of r = (c, ki, kj), for the nb images of the chunks x and
// dy (the convolution's input and output gradient), added to acc[r - r0, co] (rows
// conv_acc_width floats apart), continuing each chain:
//   acc[r, co] = fma(dy[co, b, oy, ox], x[c, b, oy + ki - pad, ox + kj - pad], acc[r, co])
// over the positions (b, oy, ox) ascending. Start from acc = 0 and call for the batch's image
// chunks in order: dw[co, r] = acc[r, co] is then the sum over the whole batch.
void conv_weight_grad(Isa isa, const ConvShape& s, Chunk<const float> x, Chunk<const float> dy,
                      float* acc, int r0, int r1, int nb, float* work);
// Row length of acc: Cout rounded up to a multiple of kMaxNr. acc needs kConvAccSlackRows rows
// more than r1 - r0.
int64_t conv_acc_width(const ConvShape& s);
inline constexpr int kConvAccSlackRows = 16;

// The per-instruction-set implementations (cpu_<isa>.cc) that the functions above dispatch to.
#define HIPPO_CONV_ISA(isa)                                                                     \
  void conv_pack_weights_##isa(const ConvShape& s, const float* w, float* packed);              \
  void conv_forward_##isa(const ConvShape& s, Chunk<const float> x, const float* packed,        \
                          const float* bias, Chunk<float> y, int nb, float* work);              \
  void conv_pool_forward_##isa(const ConvShape& s, Chunk<const float> x, const float* packed,   \
                               const float* bias, Chunk<float> y, Chunk<uint8_t> codes, int nb, \
                               float* work);                                                    \
  void conv_weight_grad_##isa(const ConvShape& s, Chunk<const float> x, Chunk<const float> dy,  \
                              float* acc, int r0, int r1, int nb, float* work);
HIPPO_CONV_ISA(portable)
HIPPO_CONV_ISA(avx2)
HIPPO_CONV_ISA(avx512)
#undef HIPPO_CONV_ISA

}  // namespace hippo::kernels::cpu

// cuDNN 9 legacy API: NCHW float forward convolution (N=2, C=3, 16x16, K=4 3x3 filters, pad 1,
// stride 1; FMA math, first successful algorithm from cudnnGetConvolutionForwardAlgorithm_v7,
// workspace from cudnnGetConvolutionForwardWorkspaceSize) on a non-default stream, then ReLU with
// cudnnActivationForward on the default stream; both checked against a CPU convolution.
// Build: nvcc -cudart shared cudnn.cu -lcudnn
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "libcheck.h"

#define CUDNN_CHECK(call) \
  LIBCHECK_CALL(#call, call, cudnnStatus_t, CUDNN_STATUS_SUCCESS, cudnnGetErrorString, int)

static const int N = 2, C = 3, H = 16, W = 16, K = 4, R = 3, S = 3, PAD = 1;

using libcheck::val;

static void check(const char* what, const std::vector<float>& g, const std::vector<double>& r) {
  libcheck::check_rel_err("cudnn", what, libcheck::rel_err(g, r), "1e-3");
}

int main() {
  cudnnHandle_t h;
  CUDNN_CHECK(cudnnCreate(&h));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  CUDNN_CHECK(cudnnSetStream(h, stream));

  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&xd));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&yd));
  CUDNN_CHECK(cudnnCreateFilterDescriptor(&wd));
  CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&cd));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, H, W));
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, K, C, R, S));
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(cd, PAD, PAD, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT));
  CUDNN_CHECK(cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH));  // no TF32: full FP32 accuracy
  int on, oc, oh, ow;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(cd, xd, wd, &on, &oc, &oh, &ow));
  if (on != N || oc != K || oh != H || ow != W) {
    std::printf("FAIL cudnn output dims %dx%dx%dx%d, expected %dx%dx%dx%d\n", on, oc, oh, ow, N, K, H, W);
    return 1;
  }
  std::printf("cudnn output dims: %dx%dx%dx%d\n", on, oc, oh, ow);
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, K, H, W));

  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int returned = 0, pick = -1;
  CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                     &returned, perf));
  for (int i = 0; i < returned && pick < 0; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS) pick = i;
  if (pick < 0) {
    std::printf("FAIL cudnn: no algorithm with status success among %d\n", returned);
    return 1;
  }
  cudnnConvolutionFwdAlgo_t algo = perf[pick].algo;
  size_t ws_bytes = 0;
  CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, algo, &ws_bytes));

  const int nx = N * C * H * W, nw = K * C * R * S, ny = N * K * H * W;
  std::vector<float> x(nx), w(nw), y(ny), z(ny);
  for (int i = 0; i < nx; ++i) x[i] = val(i, 1);
  for (int i = 0; i < nw; ++i) w[i] = val(i, 2);
  float *dx, *dw, *dy, *dz;
  void* ws = nullptr;
  CUDA_CHECK(cudaMalloc(&dx, nx * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&dw, nw * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&dy, ny * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&dz, ny * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&ws, ws_bytes > 0 ? ws_bytes : 16));
  CUDA_CHECK(cudaMemcpy(dx, x.data(), nx * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dw, w.data(), nw * sizeof(float), cudaMemcpyHostToDevice));

  float alpha = 1.0f, beta = 0.0f;
  CUDNN_CHECK(cudnnConvolutionForward(h, &alpha, xd, dx, wd, dw, cd, algo, ws, ws_bytes, &beta, yd, dy));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaMemcpy(y.data(), dy, ny * sizeof(float), cudaMemcpyDeviceToHost));

  std::vector<double> ref(ny), relu(ny);
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k)
      for (int i = 0; i < H; ++i)
        for (int j = 0; j < W; ++j) {
          double s = 0;
          for (int c = 0; c < C; ++c)
            for (int r = 0; r < R; ++r)
              for (int q = 0; q < S; ++q) {
                int ii = i + r - PAD, jj = j + q - PAD;
                if (ii < 0 || ii >= H || jj < 0 || jj >= W) continue;
                s += double(x[((n * C + c) * H + ii) * W + jj]) * w[((k * C + c) * R + r) * S + q];
              }
          int o = ((n * K + k) * H + i) * W + j;
          ref[o] = s;
          relu[o] = s > 0 ? s : 0;
        }
  check("conv fwd nchw 2x3x16x16 k=4 3x3 pad=1", y, ref);

  cudnnActivationDescriptor_t ad;
  CUDNN_CHECK(cudnnCreateActivationDescriptor(&ad));
  CUDNN_CHECK(cudnnSetActivationDescriptor(ad, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  CUDNN_CHECK(cudnnSetStream(h, 0));  // the activation runs on the default stream
  CUDNN_CHECK(cudnnActivationForward(h, ad, &alpha, yd, dy, &beta, yd, dz));
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(z.data(), dz, ny * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < ny; ++i)
    if (z[i] < 0.0f) {
      std::printf("FAIL cudnn relu: z[%d] = %g < 0\n", i, z[i]);
      return 1;
    }
  check("relu(conv) activation forward (default stream)", z, relu);

  CUDNN_CHECK(cudnnDestroyActivationDescriptor(ad));
  CUDNN_CHECK(cudnnDestroyConvolutionDescriptor(cd));
  CUDNN_CHECK(cudnnDestroyFilterDescriptor(wd));
  CUDNN_CHECK(cudnnDestroyTensorDescriptor(xd));
  CUDNN_CHECK(cudnnDestroyTensorDescriptor(yd));
  CUDNN_CHECK(cudnnDestroy(h));
  CUDA_CHECK(cudaStreamDestroy(stream));
  for (void* p : {(void*)dx, (void*)dw, (void*)dy, (void*)dz, ws}) CUDA_CHECK(cudaFree(p));
  std::printf("cudnn: all ok\n");
  return 0;
}

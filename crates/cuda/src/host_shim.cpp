// Host build of the CUDA kernel (nanobragg-cuda, feature `host-kernel`).
//
// host.rs compiles this file with the system C++ compiler as
//     [this head] [generated declarations + kernel.cu] [the tail below]
// The head maps the CUDA qualifiers and built-ins kernel.cu uses to C++ and
// libm; the tail emulates the launches of gpu.rs (every thread of a grid in
// turn, in index order) and exchanges the buffers through stdin and stdout.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

// after the system headers: glibc's own headers spell attributes __noinline__
#define __global__
#define __device__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)

struct nb_dim3 {
    unsigned int x;
};
static nb_dim3 threadIdx, blockIdx, blockDim;

static inline unsigned int atomicMin(unsigned int* address, unsigned int value) {
    const unsigned int old = *address;
    if (value < old) *address = value;
    return old;
}

// sin(pi x): x is reduced exactly to [-1, 1] first, then taken in double.
static inline float sinpif(float x) {
    double d = (double)x;
    d -= 2.0 * rint(d / 2.0);
    return (float)sin(M_PI * d);
}

//@KERNEL@

namespace {

template <typename T>
using Kernel = void (*)(const Params, const T*, const T*, const T*, const unsigned short*, float*, double*,
                        unsigned int*, double*, int);

template <typename T>
std::vector<T> read_array(size_t bytes) {
    std::vector<T> v(bytes / sizeof(T) + 1);
    if (bytes && fread(v.data(), 1, bytes, stdin) != bytes) v.clear();
    return v;
}

void read_exact(void* dst, size_t bytes) {
    if (fread(dst, 1, bytes, stdin) != bytes) {
        fprintf(stderr, "host kernel: short input\n");
        exit(2);
    }
}

// The buffers of one render and the launches of GpuRenderer::enqueue.
template <typename T>
int render(Params p, bool use_fast, Kernel<T> general, Kernel<T> fast, const uint64_t* sizes) {
    const std::vector<T> cells = read_array<T>(sizes[0]);
    const std::vector<T> sources = read_array<T>(sizes[1]);
    const std::vector<T> grid = read_array<T>(sizes[2]);
    const std::vector<unsigned short> mask = read_array<unsigned short>(sizes[3]);
    if (cells.empty() || sources.empty() || grid.empty() || mask.empty()) {
        fprintf(stderr, "host kernel: short input\n");
        return 2;
    }
    const uint64_t npix = (uint64_t)p.fpixels * (uint64_t)p.spixels;
    std::vector<float> image(npix);
    std::vector<double> omega(npix), rows(p.spixels), info(7, 0.0);
    unsigned int first = NB_NONE;
    p.write_omega = 1;
    auto launch = [&](Kernel<T> k, uint64_t threads, int mode) {
        blockDim.x = 128;
        for (uint64_t i = 0; i < threads; i++) {
            blockIdx.x = (unsigned int)(i / 128);
            threadIdx.x = (unsigned int)(i % 128);
            k(p, cells.data(), sources.data(), grid.data(), mask.data(), image.data(), omega.data(), &first,
              info.data(), mode);
        }
    };
    launch(use_fast ? fast : general, npix, 0);
    if (p.interpolate) {
        launch(general, npix, 1);
        launch(general, 1, 2);
    }
    blockDim.x = 128;
    for (int r = 0; r < p.spixels; r++) {
        blockIdx.x = (unsigned int)(r / 128);
        threadIdx.x = (unsigned int)(r % 128);
        nb_row_omega(omega.data(), rows.data(), p.fpixels, p.spixels);
    }
    fwrite(image.data(), sizeof(float), image.size(), stdout);
    fwrite(rows.data(), sizeof(double), rows.size(), stdout);
    fwrite(info.data(), sizeof(double), info.size(), stdout);
    return fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

// stdin: the Params block; u64 single, use_fast; u64 byte lengths of the
// cells, sources, grid and mask; then those arrays. stdout: the image (f32),
// the per-row solid-angle sums (f64), the fallback info (7 f64).
int main() {
    Params p;
    uint64_t head[6];
    read_exact(&p, sizeof(Params));
    read_exact(head, sizeof(head));
    const bool use_fast = head[1] != 0;
    if (head[0]) return render<float>(p, use_fast, nb_render_f32, nb_render_fast_f32, head + 2);
    return render<double>(p, use_fast, nb_render_f64, nb_render_simple_f64, head + 2);
}

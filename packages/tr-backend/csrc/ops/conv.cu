// 2-D convolution, NHWC cross-correlation with KRSC weights, grouped or not (tr/backend/cpu/ops/conv.py;
// groups as torch's: weights [K, R, S, C / groups], output channel ko reads its group's C / groups inputs), with an
// optional bias: the forward adds it to the convolution's output in one more kernel, the backward's column sum of
// dy (two passes, fixed order: deterministic) runs before the convolution's gradients.
//
// cuDNN first (conv_cudnn.cpp: the frontend's fprop/dgrad/wgrad graphs, deterministic engines), unless the
// call asks for the direct kernels (engine = 2), a pin names them (set_conv_pins: "direct"), or cuDNN cannot
// take it (engine = 0 then falls back; 1, or a pinned cuDNN engine, makes that an error). The direct kernels
// are correct and deterministic but slow: forward and dgrad give each output element one thread that sums its
// window in a fixed order; wgrad gives each weight one block that reduces over N*P*Q with a fixed tree.
#include "cuda/context.hpp"
#include "ops/args/conv.hpp"
#include "ops/conv_cudnn.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

using Geo = ConvGeo;  // the geometry both engines take (ops/conv_cudnn.hpp)

// A: ConvFwdArgs or ConvBwdArgs (one geometry).
template <class A>
Geo geo_of(const A& a) {
  auto g = [](std::int64_t v) { return static_cast<int>(v); };
  Geo geo{g(a.n), g(a.ih), g(a.iw), g(a.c), g(a.k), g(a.kh), g(a.kw), g(a.sh), g(a.sw), g(a.ph), g(a.pw), g(a.p),
          g(a.q)};
  geo.groups = g(a.groups);
  if (geo.groups < 1 || geo.c % geo.groups != 0 || geo.k % geo.groups != 0) {
    bad(a, "groups (" + std::to_string(geo.groups) + ") must divide the input channels (" + std::to_string(geo.c) +
               ") and the output channels (" + std::to_string(geo.k) + ")");
  }
  return geo;
}

template <class TX, class TY>
__global__ void conv_fwd_kernel(const TX* x, const TX* wt, TY* y, Geo g) {
  TR_GRID_STRIDE(i, static_cast<std::int64_t>(g.n) * g.p * g.q * g.k) {
    const int ko = static_cast<int>(i % g.k);
    std::int64_t rem = i / g.k;
    const int oq = static_cast<int>(rem % g.q);
    rem /= g.q;
    const int op = static_cast<int>(rem % g.p);
    const int n = static_cast<int>(rem / g.p);
    const int cg = g.c / g.groups, c0 = ko / (g.k / g.groups) * cg;  // this output channel's input channels
    float acc = 0.0f;
    for (int r = 0; r < g.r; ++r) {
      const int hh = op * g.sh - g.ph + r;
      if (hh < 0 || hh >= g.h) continue;
      for (int s = 0; s < g.s; ++s) {
        const int ww = oq * g.sw - g.pw + s;
        if (ww < 0 || ww >= g.w) continue;
        const TX* xr = x + ((static_cast<std::int64_t>(n) * g.h + hh) * g.w + ww) * g.c + c0;
        const TX* wr = wt + ((static_cast<std::int64_t>(ko) * g.r + r) * g.s + s) * cg;
        for (int c = 0; c < cg; ++c) acc += kern::to_f(xr[c]) * kern::to_f(wr[c]);
      }
    }
    y[i] = kern::from_f<TY>(acc);
  }
}

// dw[k, r, s, c] = sum over (n, p, q) of dy[n, p, q, k] * x[n, p*sh - ph + r, q*sw - pw + s, c0 + c] (c0: the
// first input channel of k's group); one block each.
template <class TX, class TD, class TW>
__global__ void conv_wgrad_kernel(const TX* x, const TD* dy, TW* dw, Geo g) {
  __shared__ float sf[32];
  const std::int64_t j = blockIdx.x;
  const int cg = g.c / g.groups;
  const int cl = static_cast<int>(j % cg);
  std::int64_t rem = j / cg;
  const int s = static_cast<int>(rem % g.s);
  rem /= g.s;
  const int r = static_cast<int>(rem % g.r);
  const int ko = static_cast<int>(rem / g.r);
  const int c = ko / (g.k / g.groups) * cg + cl;
  float acc = 0.0f;
  const std::int64_t total = static_cast<std::int64_t>(g.n) * g.p * g.q;
  for (std::int64_t o = threadIdx.x; o < total; o += blockDim.x) {
    const int oq = static_cast<int>(o % g.q);
    const std::int64_t t = o / g.q;
    const int op = static_cast<int>(t % g.p);
    const int n = static_cast<int>(t / g.p);
    const int hh = op * g.sh - g.ph + r, ww = oq * g.sw - g.pw + s;
    if (hh < 0 || hh >= g.h || ww < 0 || ww >= g.w) continue;
    acc += kern::to_f(dy[o * g.k + ko]) * kern::to_f(x[((static_cast<std::int64_t>(n) * g.h + hh) * g.w + ww) * g.c + c]);
  }
  acc = kern::block_reduce(acc, kern::Sum(), sf);
  if (threadIdx.x == 0) dw[j] = kern::from_f<TW>(acc);
}

// dx[n, h, w, c] = sum over (k of c's group, r, s) with h = p*sh - ph + r, w = q*sw - pw + s of
// dy[n, p, q, k] * w[k, r, s, c - c0].
template <class TX, class TD, class TO>
__global__ void conv_dgrad_kernel(const TX* wt, const TD* dy, TO* dx, Geo g) {
  TR_GRID_STRIDE(i, static_cast<std::int64_t>(g.n) * g.h * g.w * g.c) {
    const int c = static_cast<int>(i % g.c);
    std::int64_t rem = i / g.c;
    const int ww = static_cast<int>(rem % g.w);
    rem /= g.w;
    const int hh = static_cast<int>(rem % g.h);
    const int n = static_cast<int>(rem / g.h);
    const int cg = g.c / g.groups, kg = g.k / g.groups;
    const int grp = c / cg, cl = c % cg;
    float acc = 0.0f;
    for (int r = 0; r < g.r; ++r) {
      const int a = hh + g.ph - r;
      if (a < 0 || a % g.sh != 0 || a / g.sh >= g.p) continue;
      const int op = a / g.sh;
      for (int s = 0; s < g.s; ++s) {
        const int b = ww + g.pw - s;
        if (b < 0 || b % g.sw != 0 || b / g.sw >= g.q) continue;
        const int oq = b / g.sw;
        const TD* d = dy + ((static_cast<std::int64_t>(n) * g.p + op) * g.q + oq) * g.k;
        for (int ko = grp * kg; ko < (grp + 1) * kg; ++ko) {
          acc += kern::to_f(d[ko]) * kern::to_f(wt[((static_cast<std::int64_t>(ko) * g.r + r) * g.s + s) * cg + cl]);
        }
      }
    }
    dx[i] = kern::from_f<TO>(acc);
  }
}

// y[r, c] += bias[c] over rows x cols (NHWC: cols = K), in float.
template <class TY, class TB>
__global__ void bias_add_kernel(TY* y, const TB* bias, std::int64_t rows, int cols) {
  TR_GRID_STRIDE(i, rows * cols) y[i] = kern::from_f<TY>(kern::to_f(y[i]) + kern::to_f(bias[i % cols]));
}

constexpr int kBiasCols = 32, kBiasLanes = 8;  // a bias-gradient block: 32 columns x 8 row lanes
constexpr std::int64_t kBiasMaxChunks = 512;

// Pass 1: block (x, y) sums the rows of chunk y for columns 32x .. 32x + 31; lane j takes rows j, j + 8, ...
// of the chunk, then lane 0 adds the 8 lane sums in order.
template <class TD>
__global__ void bias_grad_partial_kernel(const TD* dy, float* part, std::int64_t rows, int cols,
                                         std::int64_t chunk_rows) {
  __shared__ float lanes[kBiasLanes][kBiasCols + 1];
  const int c = blockIdx.x * kBiasCols + threadIdx.x;
  const std::int64_t r0 = blockIdx.y * chunk_rows;
  const std::int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
  float acc = 0.0f;
  if (c < cols) {
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kBiasLanes) acc += kern::to_f(dy[r * cols + c]);
  }
  lanes[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float t = 0.0f;
    for (int j = 0; j < kBiasLanes; ++j) t += lanes[j][threadIdx.x];
    part[blockIdx.y * cols + c] = t;
  }
}

// Pass 2: db[c] = the chunks' partial sums of column c, in chunk order.
__global__ void bias_grad_final_kernel(const float* part, float* db, int chunks, int cols) {
  TR_GRID_STRIDE(c, cols) {
    float t = 0.0f;
    for (int j = 0; j < chunks; ++j) t += part[static_cast<std::int64_t>(j) * cols + c];
    db[c] = t;
  }
}

// The convolution `conv`, then y += b (a forward with a bias), or the same op when the call has none.
std::unique_ptr<Op> with_bias_add(std::unique_ptr<Op> conv, const ConvFwdArgs& args, const Geo& g, DT ydt,
                                  void* y) {
  if (!args.b) return conv;
  const DT bdt = args.b.dt;
  const void* b = args.b.ptr;
  kern::dispatch_float(bdt, args, "b", [](auto) {});
  const std::int64_t rows = std::int64_t(g.n) * g.p * g.q;
  const int cols = g.k;
  std::shared_ptr<Op> inner(conv.release());
  return fn_op([=](cudaStream_t s) {
    inner->record(s);
    kern::dispatch_float(ydt, args, "y", [&](auto ty) {
      using TY = typename decltype(ty)::type;
      kern::dispatch_float(bdt, args, "b", [&](auto tb) {
        using TB = typename decltype(tb)::type;
        bias_add_kernel<TY, TB><<<kern::blocks_for(rows * cols), kern::kThreads, 0, s>>>(
            static_cast<TY*>(y), static_cast<const TB*>(b), rows, cols);
      });
    });
    check_launch("conv bias");
  }, inner->info + ", bias kernel");
}

// db = the column sums of dy, then the convolution's gradients `conv` (a backward with db), or `conv` alone.
std::unique_ptr<Op> with_bias_grad(std::unique_ptr<Op> conv, const ConvBwdArgs& args, const Geo& g, DT ddt,
                                   const void* dy) {
  if (!args.db) return conv;
  if (args.db.dt != DT::F32) bad(args, "db must be FP32");
  float* db = static_cast<float*>(args.db.ptr);
  const std::int64_t rows = std::int64_t(g.n) * g.p * g.q;
  const int cols = g.k;
  std::int64_t chunks = (rows + 127) / 128;
  if (chunks > kBiasMaxChunks) chunks = kBiasMaxChunks;
  if (chunks < 1) chunks = 1;
  const std::int64_t chunk_rows = (rows + chunks - 1) / chunks;
  chunks = (rows + chunk_rows - 1) / chunk_rows;
  auto part = std::make_shared<DeviceBuffer>(static_cast<std::size_t>(chunks) * cols * sizeof(float));
  std::shared_ptr<Op> inner(conv.release());
  const dim3 grid(static_cast<unsigned>((cols + kBiasCols - 1) / kBiasCols), static_cast<unsigned>(chunks));
  const int n_chunks = static_cast<int>(chunks);
  return fn_op([=](cudaStream_t s) {
    kern::dispatch_float(ddt, args, "dy", [&](auto td) {
      using TD = typename decltype(td)::type;
      bias_grad_partial_kernel<TD><<<grid, dim3(kBiasCols, kBiasLanes), 0, s>>>(
          static_cast<const TD*>(dy), part->as<float>(), rows, cols, chunk_rows);
    });
    bias_grad_final_kernel<<<kern::blocks_for(cols), kern::kThreads, 0, s>>>(part->as<float>(), db, n_chunks, cols);
    check_launch("conv bias gradient");
    inner->record(s);
  }, "bias gradient kernels, " + inner->info);
}

// engine (TR_CONV): AUTO cuDNN, else the direct kernels; CUDNN cuDNN or an error; DIRECT the direct kernels.
template <class A>
ConvEngine engine_of(const A& args) {
  return args.engine;  // a code of ConvEngine: the record checked its range
}

template <class A>
ConvChoice choice_of(const A& args) {
  return {args.tf32, args.autotune};
}

// One direction of an op: its plan's key and dtypes (a, b, out as conv_cudnn.cpp's plans take them).
struct DirCall {
  ConvDir dir;
  DT a, b, out;
};

std::vector<DirCall> directions(const ConvFwdArgs& args) {
  return {{ConvDir::Fwd, args.x.dt, args.x.dt, args.y.dt}};
}

std::vector<DirCall> directions(const ConvBwdArgs& args) {
  std::vector<DirCall> out{{ConvDir::Wgrad, args.dy.dt, args.x.dt, args.dw.dt}};
  if (args.dx) out.push_back({ConvDir::Dgrad, args.dy.dt, args.x.dt, args.dx.dt});
  return out;
}

// The pins of an op's plans: none, the direct kernels, or cuDNN engines (an op runs one or the other, so a mix
// is refused); a pin contradicting TR_CONV is refused too.
enum class Pin { None, Direct, Cudnn };

template <class A>
Pin pin_of(const A& args, const Geo& g, ConvEngine engine) {
  Pin pin = Pin::None;
  const bool tf32 = choice_of(args).tf32;
  for (const DirCall& d : directions(args)) {
    const std::string key = conv_plan_key(d.dir, g, d.a, d.b, d.out, tf32);
    const std::string p = conv_pin(key);
    if (p.empty()) continue;
    const Pin here = p == "direct" ? Pin::Direct : Pin::Cudnn;
    if (pin != Pin::None && pin != here) {
      bad(args, "the pins of one op's plans mix the direct kernels and cuDNN (" + key + " is pinned to '" + p + "')");
    }
    pin = here;
    if (here == Pin::Direct && engine == ConvEngine::CUDNN) bad(args, key + " is pinned to the direct kernels but TR_CONV=cudnn");
    if (here == Pin::Cudnn && engine == ConvEngine::DIRECT) bad(args, key + " is pinned to cuDNN engine '" + p + "' but TR_CONV=direct");
  }
  return pin;
}

// The cuDNN op, or nullptr to take the direct kernels (engine 0: `why` goes into their op info).
template <class A>
std::unique_ptr<Op> cudnn_or_fallback(const A& args, ConvEngine engine, Pin pin, std::unique_ptr<Op> op,
                                      const std::string& why, std::string& fallback_note) {
  if (op != nullptr) return op;
  if (engine == ConvEngine::CUDNN) bad(args, "cuDNN cannot run this convolution: " + why);
  if (pin == Pin::Cudnn) bad(args, "cuDNN cannot run this convolution, whose engine is pinned: " + why);
  fallback_note = " (cuDNN: " + why + ")";
  return nullptr;
}

}  // namespace

std::unique_ptr<Op> conv_fwd(Context& ctx, const ConvFwdArgs& args) {
  const Geo g = geo_of(args);
  const DT xdt = args.x.dt, ydt = args.y.dt;
  if (args.w.dt != xdt) bad(args, "w and x must have one dtype");
  const void* x = args.x.ptr;
  const void* w = args.w.ptr;
  void* y = args.y.ptr;
  const ConvEngine engine = engine_of(args);
  const Pin pin = pin_of(args, g, engine);
  std::string note = pin == Pin::Direct ? " (pinned)" : "";
  if (engine != ConvEngine::DIRECT && pin != Pin::Direct) {
    std::string why;
    auto op = cudnn_conv_fwd(ctx, g, xdt, ydt, x, w, y, choice_of(args), why);
    if (auto done = cudnn_or_fallback(args, engine, pin, std::move(op), why, note)) {
      return with_bias_add(std::move(done), args, g, ydt, y);
    }
  }
  kern::dispatch_float(xdt, args, "x", [](auto) {});
  kern::dispatch_float(ydt, args, "y", [](auto) {});
  return with_bias_add(fn_op([=](cudaStream_t s) {
    kern::dispatch_float(xdt, args, "x", [&](auto tx) {
      using TX = typename decltype(tx)::type;
      kern::dispatch_float(ydt, args, "y", [&](auto ty) {
        using TY = typename decltype(ty)::type;
        conv_fwd_kernel<TX, TY><<<kern::blocks_for(std::int64_t(g.n) * g.p * g.q * g.k), kern::kThreads, 0, s>>>(
            static_cast<const TX*>(x), static_cast<const TX*>(w), static_cast<TY*>(y), g);
      });
    });
    check_launch("conv_fwd");
  }, "direct conv fprop" + note), args, g, ydt, y);
}

std::unique_ptr<Op> conv_bwd(Context& ctx, const ConvBwdArgs& args) {
  const Geo g = geo_of(args);
  const DT xdt = args.x.dt, ddt = args.dy.dt, wdt = args.dw.dt;
  if (args.w.dt != xdt) bad(args, "w and x must have one dtype");
  const bool has_dx = static_cast<bool>(args.dx);
  const DT odt = has_dx ? args.dx.dt : xdt;
  const void* x = args.x.ptr;
  const void* w = args.w.ptr;
  const void* dy = args.dy.ptr;
  void* dw = args.dw.ptr;
  void* dx = has_dx ? args.dx.ptr : nullptr;
  for (DT dt : {xdt, ddt, wdt, odt}) kern::dispatch_float(dt, args, "x, dy, dw, dx", [](auto) {});
  const ConvEngine engine = engine_of(args);
  const Pin pin = pin_of(args, g, engine);
  std::string note = pin == Pin::Direct ? " (pinned)" : "";
  if (engine != ConvEngine::DIRECT && pin != Pin::Direct) {
    std::string why;
    auto op = cudnn_conv_bwd(ctx, g, xdt, ddt, wdt, odt, x, w, dy, dw, dx, choice_of(args), why);
    if (auto done = cudnn_or_fallback(args, engine, pin, std::move(op), why, note)) {
      return with_bias_grad(std::move(done), args, g, ddt, dy);
    }
  }
  const unsigned wblocks = static_cast<unsigned>(std::int64_t(g.k) * g.r * g.s * (g.c / g.groups));
  return with_bias_grad(fn_op([=](cudaStream_t s) {
    kern::dispatch_float(xdt, args, "x", [&](auto tx) {
      using TX = typename decltype(tx)::type;
      kern::dispatch_float(ddt, args, "dy", [&](auto td) {
        using TD = typename decltype(td)::type;
        kern::dispatch_float(wdt, args, "dw", [&](auto tw) {
          using TW = typename decltype(tw)::type;
          conv_wgrad_kernel<TX, TD, TW><<<wblocks, kern::kThreads, 0, s>>>(
              static_cast<const TX*>(x), static_cast<const TD*>(dy), static_cast<TW*>(dw), g);
        });
        if (dx != nullptr) {
          kern::dispatch_float(odt, args, "dx", [&](auto to) {
            using TO = typename decltype(to)::type;
            conv_dgrad_kernel<TX, TD, TO><<<kern::blocks_for(std::int64_t(g.n) * g.h * g.w * g.c), kern::kThreads, 0,
                                            s>>>(static_cast<const TX*>(w), static_cast<const TD*>(dy),
                                                 static_cast<TO*>(dx), g);
          });
        }
      });
    });
    check_launch("conv_bwd");
  }, std::string(dx != nullptr ? "direct conv wgrad, dgrad" : "direct conv wgrad") + note), args, g, ddt, dy);
}

namespace {

template <class A>
std::vector<ConvPlanRecord> plans_of(int device, const A& args) {
  const Geo g = geo_of(args);
  const ConvChoice choice = choice_of(args);
  const ConvEngine engine = engine_of(args);
  const bool direct = pin_of(args, g, engine) == Pin::Direct || engine == ConvEngine::DIRECT;  // pin_of refuses what make_op does
  std::vector<ConvPlanRecord> out;
  for (const DirCall& d : directions(args)) {
    ConvPlanRecord r;
    if (direct || !cudnn_plan_record(device, d.dir, g, d.a, d.b, d.out, choice, r)) {
      r.key = conv_plan_key(d.dir, g, d.a, d.b, d.out, choice.tf32);
      r.direction = conv_dir_name(d.dir);
      r.engine = r.source = "direct";
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

std::vector<ConvPlanRecord> conv_op_plans(int device, const ConvFwdArgs& args) { return plans_of(device, args); }

std::vector<ConvPlanRecord> conv_op_plans(int device, const ConvBwdArgs& args) { return plans_of(device, args); }

}  // namespace tr::native

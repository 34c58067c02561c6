// 2-D convolution, NHWC cross-correlation with KRSC weights, no bias, grouped or not (tr/backend/cpu/ops/conv.py;
// groups as torch's: weights [K, R, S, C / groups], output channel ko reads its group's C / groups inputs).
//
// cuDNN first (conv_cudnn.cpp: the frontend's fprop/dgrad/wgrad graphs, deterministic engines), unless the
// call asks for the direct kernels (engine = 2) or cuDNN cannot take it (engine = 0 then falls back; 1 makes
// that an error). The direct kernels are correct and deterministic but slow: forward and dgrad give each
// output element one thread that sums its window in a fixed order; wgrad gives each weight one block that
// reduces over N*P*Q with a fixed tree.
#include "cuda/context.hpp"
#include "ops/conv_cudnn.hpp"
#include "ops/kernels.cuh"

namespace tr::native {

namespace {

using Geo = ConvGeo;  // the geometry both engines take (ops/conv_cudnn.hpp)

Geo geo_of(const OpArgs& a) {
  auto g = [&](const char* key) { return static_cast<int>(a.i(key)); };
  Geo geo{g("n"), g("h"), g("w"), g("c"), g("k"), g("kh"), g("kw"), g("sh"), g("sw"), g("ph"), g("pw"), g("p"), g("q")};
  geo.groups = static_cast<int>(a.i("groups", 1));
  if (geo.groups < 1 || geo.c % geo.groups != 0 || geo.k % geo.groups != 0) {
    a.bad("groups (" + std::to_string(geo.groups) + ") must divide the input channels (" + std::to_string(geo.c) +
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

// engine: 0 cuDNN, else the direct kernels; 1 cuDNN or an error; 2 the direct kernels.
int engine_of(const OpArgs& args) {
  const int e = static_cast<int>(args.i("engine", 0));
  if (e < 0 || e > 2) args.bad("engine must be 0 (auto), 1 (cuDNN) or 2 (direct), got " + std::to_string(e));
  return e;
}

ConvChoice choice_of(const OpArgs& args) { return {args.i("tf32", 0) != 0, args.i("autotune", 1) != 0}; }

// The cuDNN op, or nullptr to take the direct kernels (engine 0: `why` goes into their op info).
std::unique_ptr<Op> cudnn_or_fallback(const OpArgs& args, int engine, std::unique_ptr<Op> op, const std::string& why,
                                      std::string& fallback_note) {
  if (op != nullptr) return op;
  if (engine == 1) args.bad("cuDNN cannot run this convolution: " + why);
  fallback_note = " (cuDNN: " + why + ")";
  return nullptr;
}

std::unique_ptr<Op> conv_fwd(Context& ctx, const OpArgs& args) {
  const Geo g = geo_of(args);
  const DT xdt = args.dt("x"), ydt = args.dt("y");
  if (args.dt("w") != xdt) args.bad("w and x must have one dtype");
  const void* x = args.ptr("x");
  const void* w = args.ptr("w");
  void* y = args.ptr("y");
  const int engine = engine_of(args);
  std::string note;
  if (engine != 2) {
    std::string why;
    auto op = cudnn_conv_fwd(ctx, g, xdt, ydt, x, w, y, choice_of(args), why);
    if (auto done = cudnn_or_fallback(args, engine, std::move(op), why, note)) return done;
  }
  kern::dispatch_float(xdt, args, "x", [](auto) {});
  kern::dispatch_float(ydt, args, "y", [](auto) {});
  return fn_op([=](cudaStream_t s) {
    kern::dispatch_float(xdt, args, "x", [&](auto tx) {
      using TX = typename decltype(tx)::type;
      kern::dispatch_float(ydt, args, "y", [&](auto ty) {
        using TY = typename decltype(ty)::type;
        conv_fwd_kernel<TX, TY><<<kern::blocks_for(std::int64_t(g.n) * g.p * g.q * g.k), kern::kThreads, 0, s>>>(
            static_cast<const TX*>(x), static_cast<const TX*>(w), static_cast<TY*>(y), g);
      });
    });
    check_launch("conv_fwd");
  }, "direct conv fprop" + note);
}

std::unique_ptr<Op> conv_bwd(Context& ctx, const OpArgs& args) {
  const Geo g = geo_of(args);
  const DT xdt = args.dt("x"), ddt = args.dt("dy"), wdt = args.dt("dw");
  if (args.dt("w") != xdt) args.bad("w and x must have one dtype");
  const bool has_dx = args.has("dx");
  const DT odt = has_dx ? args.dt("dx") : xdt;
  const void* x = args.ptr("x");
  const void* w = args.ptr("w");
  const void* dy = args.ptr("dy");
  void* dw = args.ptr("dw");
  void* dx = has_dx ? args.ptr("dx") : nullptr;
  for (DT dt : {xdt, ddt, wdt, odt}) kern::dispatch_float(dt, args, "x, dy, dw, dx", [](auto) {});
  const int engine = engine_of(args);
  std::string note;
  if (engine != 2) {
    std::string why;
    auto op = cudnn_conv_bwd(ctx, g, xdt, ddt, wdt, odt, x, w, dy, dw, dx, choice_of(args), why);
    if (auto done = cudnn_or_fallback(args, engine, std::move(op), why, note)) return done;
  }
  const unsigned wblocks = static_cast<unsigned>(std::int64_t(g.k) * g.r * g.s * (g.c / g.groups));
  return fn_op([=](cudaStream_t s) {
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
  }, std::string(dx != nullptr ? "direct conv wgrad, dgrad" : "direct conv wgrad") + note);
}

}  // namespace

void register_conv_ops() {
  register_factory("conv_fwd", &conv_fwd);
  register_factory("conv_bwd", &conv_bwd);
}

}  // namespace tr::native

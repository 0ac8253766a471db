/*
 * triton_router.c - a router launched as Triton launches SGLang 0.5.23's
 * _router_triton_kernel, on the CPU fixture.
 *
 *   triton_router STEPS LAYERS ROWS K [ex]
 *   triton_router image PATH    write the module image (the "cubin") there
 *
 * The kernel is loaded from a cubin (the fixture's image wrapped in an ELF,
 * fixture.h) with cuModuleLoadData (with `ex`: cuModuleLoadDataEx, as
 * other JITs do) and launched with a cuLaunchKernelEx found by
 * dlsym(dlopen("libcuda.so.1")), as Triton's launcher does.  Its parameters are those Triton 3.7.1 keeps of the
 * router for a DeepSeek-V3-like model (tests/engines/triton/sglang-0.5.23/
 * deepseek-v3-m8; M > 1): the arguments equal to 1 or None gone, two
 * scratch pointers at the end.  Each step launches LAYERS routers of ROWS
 * rows (their outputs a tensor each) and waits for the stream, as an engine
 * waits for its sampled tokens.  Prints, per launch, the truth a routing record must hold:
 * "route STEP LAYER ROWS K ids... | weights..." (weights as %a).
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "fixture.h"

#define NAME "_router_triton_kernel"
#define EXPERTS 256

/* The kept arguments, in parameter order. */
enum {
	P_SCORES, P_BIAS, P_WEIGHTS, P_INDICES, P_PACKED, P_M, P_SCALE, P_SOFTCAP,
	P_STRIDE_BIAS_ALT, P_STRIDE_INPUT_IDS, P_STRIDE_SM, P_STRIDE_WM, P_STRIDE_IM,
	P_STRIDE_PM, P_STRIDE_PK, P_GLOBAL_SCRATCH, P_PROFILE_SCRATCH, NPARAMS
};

static int arg_int(const struct fixture_launch *l, unsigned i)
{
	int v;

	memcpy(&v, l->args[i], sizeof v);
	return v;
}

static void *arg_ptr(const struct fixture_launch *l, unsigned i)
{
	void *p;

	memcpy(&p, l->args[i], sizeof p);
	return p;
}

/* Each launch routes by its routed_scaling_factor, which the program makes
 * different for every launch. */
static void router_host(const struct fixture_launch *l)
{
	const float *scores = arg_ptr(l, P_SCORES);
	float *weights = arg_ptr(l, P_WEIGHTS);
	int *ids = arg_ptr(l, P_INDICES);
	int m = arg_int(l, P_M), k = arg_int(l, P_STRIDE_IM), seed;
	float scale;

	memcpy(&scale, l->args[P_SCALE], sizeof scale);
	seed = (int)scale + (int)scores[0];

	for (int r = 0; r < m; r++)
		for (int j = 0; j < k; j++) {
			ids[r * k + j] = (seed + 7 * r + 31 * j) % EXPERTS;
			weights[r * k + j] = 1.0f / (float)(1 + seed + r + j);
		}
}
FIXTURE_KERNEL(router_host, NAME, NPARAMS, 8, 8, 8, 8, 8, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 8, 8)

#define CHECK(call)                                                                     \
	do {                                                                            \
		int rc_ = (int)(call);                                                  \
		if (rc_) {                                                              \
			fprintf(stderr, "triton_router: %s: error %d\n", #call, rc_);   \
			exit(2);                                                        \
		}                                                                       \
	} while (0)

/* The fixture's image of the kernel as a cubin: an ELF header whose
 * section header table (one empty entry) ends the file. */
static size_t make_image(unsigned char *buf, size_t len)
{
	static const char inner[] = FIXTURE_MODULE_IMAGE(NAME "\0");
	uint64_t shoff = FIXTURE_ELF_HEADER + sizeof inner;
	uint16_t shentsize = 64, shnum = 1;
	size_t n = shoff + 64;

	if (n > len)
		return 0;
	memset(buf, 0, n);
	memcpy(buf, "\177ELF\2\1\1", 7);	/* 64-bit, little-endian, version 1 */
	memcpy(buf + 0x28, &shoff, sizeof shoff);
	memcpy(buf + 0x3a, &shentsize, sizeof shentsize);
	memcpy(buf + 0x3c, &shnum, sizeof shnum);
	memcpy(buf + FIXTURE_ELF_HEADER, inner, sizeof inner);
	return n;
}

#define MAX_LAYERS 8
#define MAX_OUT (16 * 64)

int main(int argc, char **argv)
{
	unsigned char image[512];
	size_t image_len = make_image(image, sizeof image);
	CUresult (*launch_ex)(const CUlaunchConfig *, CUfunction, void **, void **);
	CUdeviceptr scores, bias, weights[MAX_LAYERS], indices[MAX_LAYERS], packed;
	int steps, layers, m, k, zero = 0, experts = EXPERTS;
	float softcap = 0.0f, first = 0.0f;
	CUdeviceptr scratch = 0;
	CUlaunchConfig cfg;
	CUcontext ctx;
	CUmodule mod;
	CUfunction fn;
	CUdevice dev;
	void *libcuda;

	if (argc == 3 && !strcmp(argv[1], "image")) {
		FILE *f = fopen(argv[2], "wb");

		if (!f || fwrite(image, 1, image_len, f) != image_len || fclose(f)) {
			perror(argv[2]);
			return 2;
		}
		return 0;
	}
	if (argc < 5 || argc > 6 || (argc == 6 && strcmp(argv[5], "ex")) ||
	    (steps = atoi(argv[1])) < 1 || (layers = atoi(argv[2])) < 1 ||
	    layers > MAX_LAYERS || (m = atoi(argv[3])) < 2 || (k = atoi(argv[4])) < 2 ||
	    m * k > MAX_OUT) {
		fprintf(stderr, "usage: triton_router STEPS LAYERS(1..%d) ROWS(>=2) K(>=2) [ex], "
			"ROWS x K <= %d\n", MAX_LAYERS, MAX_OUT);
		return 2;
	}
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	if (argc == 6)
		CHECK(cuModuleLoadDataEx(&mod, image, 0, NULL, NULL));
	else
		CHECK(cuModuleLoadData(&mod, image));
	CHECK(cuModuleGetFunction(&fn, mod, NAME));
	if (!(libcuda = dlopen("libcuda.so.1", RTLD_NOW)) ||
	    !(*(void **)&launch_ex = dlsym(libcuda, "cuLaunchKernelEx"))) {
		fprintf(stderr, "triton_router: no cuLaunchKernelEx: %s\n", dlerror());
		return 2;
	}
	CHECK(cuMemAlloc(&scores, (size_t)m * EXPERTS * sizeof(float)));
	CHECK(cuMemcpyHtoD(scores, &first, sizeof first));
	CHECK(cuMemAlloc(&bias, EXPERTS * sizeof(float)));
	CHECK(cuMemAlloc(&packed, sizeof(int)));
	for (int layer = 0; layer < layers; layer++) {
		CHECK(cuMemAlloc(&weights[layer], (size_t)m * (size_t)k * sizeof(float)));
		CHECK(cuMemAlloc(&indices[layer], (size_t)m * (size_t)k * sizeof(int)));
	}
	memset(&cfg, 0, sizeof cfg);
	cfg.gridDimX = (unsigned)m;
	cfg.gridDimY = cfg.gridDimZ = 1;
	cfg.blockDimX = 32;
	cfg.blockDimY = cfg.blockDimZ = 1;
	for (int s = 0; s < steps; s++) {
		for (int layer = 0; layer < layers; layer++) {
			float scale = (float)(s * layers + layer);
			void *params[NPARAMS] = {
				[P_SCORES] = &scores, [P_BIAS] = &bias,
				[P_WEIGHTS] = &weights[layer], [P_INDICES] = &indices[layer],
				[P_PACKED] = &packed, [P_M] = &m, [P_SCALE] = &scale,
				[P_SOFTCAP] = &softcap, [P_STRIDE_BIAS_ALT] = &zero,
				[P_STRIDE_INPUT_IDS] = &zero, [P_STRIDE_SM] = &experts,
				[P_STRIDE_WM] = &k, [P_STRIDE_IM] = &k, [P_STRIDE_PM] = &zero,
				[P_STRIDE_PK] = &zero, [P_GLOBAL_SCRATCH] = &scratch,
				[P_PROFILE_SCRATCH] = &scratch,
			};

			CHECK(launch_ex(&cfg, fn, params, NULL));
		}
		CHECK(cuStreamSynchronize(NULL));
		for (int layer = 0; layer < layers; layer++) {
			int ids[MAX_OUT];
			float w[MAX_OUT];

			CHECK(cuMemcpyDtoH(ids, indices[layer], (size_t)m * (size_t)k * sizeof(int)));
			CHECK(cuMemcpyDtoH(w, weights[layer], (size_t)m * (size_t)k * sizeof(float)));
			printf("route %d %d %d %d", s, layer, m, k);
			for (int i = 0; i < m * k; i++)
				printf(" %d", ids[i]);
			printf(" |");
			for (int i = 0; i < m * k; i++)
				printf(" %a", (double)w[i]);
			printf("\n");
		}
	}
	CHECK(cuModuleUnload(mod));
	return 0;
}

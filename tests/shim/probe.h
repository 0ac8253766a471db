/*
 * probe.h - what probe.c does, counted: the numbers test_preload.c expects
 * from libmoeft.so's summary line and log when it runs the probe.
 */
#ifndef MOEFT_PROBE_H
#define MOEFT_PROBE_H

/* probe run */
#define PROBE_ALLOCS 6          /* cudaMalloc x2, cuMemAlloc_v2 (proc address),
				   cudaMallocAsync, cudaMallocManaged, cuMemMap */
#define PROBE_ROUTING_LAUNCHES 9 /* cudaLaunchKernel x2, __cudaLaunchKernel,
				   cudaLaunchKernelExC, cudaLaunchCooperativeKernel,
				   cuLaunchKernelEx (dlsym), cuLaunchCooperativeKernel
				   (dlsym), cuLaunchKernel_ptsz (proc address), one
				   captured */
#define PROBE_OTHER_LAUNCHES 3  /* a kernel no rule owns: x2, one captured */
#define PROBE_GRAPH_LAUNCHES 2
#define PROBE_KERNELS 3         /* routing kernel's host stub and its handle
				   (the fixture's cudaKernel_t is its CUfunction),
				   the other kernel's stub */
#define PROBE_MATCHED 2

/* The runtime probe is linked to (probe12: libcudart.so.12). */
#ifndef PROBE_CUDART
#define PROBE_CUDART "libcudart.so.13"
#endif

/* probe check CUDART12: the size it allocates through that runtime */
#define PROBE_RT12_SIZE 24576

/* privuser.c: the size it allocates through its private runtime copy */
#define PROBE_PRIVATE_SIZE 40960

/* probe fork: the parent allocates PROBE_FORK_ALLOCS and frees them; its
 * child allocates and frees one of PROBE_FORK_CHILD_SIZE bytes */
#define PROBE_FORK_ALLOCS 2
#define PROBE_FORK_CHILD_SIZE 8192

/* The routing kernel's name: vLLM's topkGating (built-in rule
 * "*4vllm3moe10topkGatingI* ids=p4:i32 rows=p3 k=p6"). */
#define PROBE_TOPK_NAME "_ZN4vllm3moe10topkGatingILi8ELi8ELi4ELi16ELi32EifEEvPKT4_PKbPfiPiS7_iii"
#define PROBE_SCALE_NAME "_Z5scalePfif"

#endif

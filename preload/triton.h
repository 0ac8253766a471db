/*
 * triton.h - where a Triton kernel's arguments sit among its parameters.
 *
 * Triton compiles one kernel per specialization of its Python arguments:
 * constexpr arguments, integers equal to 1 and None are folded into the
 * code and leave the parameter list, and scratch pointers are appended.
 * A fixed parameter index is therefore wrong for some launches, and the
 * parameter table alone (sizes) cannot say which argument was dropped.
 * Triton writes each compiled kernel's IR into its cache directory
 * ($TRITON_CACHE_DIR, else $TRITON_HOME/.triton/cache, else
 * $HOME/.triton/cache): <hash>/<kernel>.source (Triton 3.4 and later)
 * or <hash>/<kernel>.ttir, whose `tt.func public @<kernel>(...)` line
 * names every argument the kernel kept, in order, with its type.  A
 * profile rule lists the launcher's argument names (`triton=`); the two
 * together place each of them, or prove it dropped.
 */
#ifndef MOEFT_TRITON_H
#define MOEFT_TRITON_H

#include <stddef.h>
#include <stdint.h>

#define TRITON_MAX_ARGS 64
#define TRITON_NAME_MAX 64          /* bytes of an argument name, NUL included */
#define TRITON_MAX_SCRATCH 2        /* pointers Triton appends (3.5 and later: 2) */
#define TRITON_DROPPED (-1)         /* map[]: folded into the code (1 or None) */
#define TRITON_ELEM_MAX 8           /* bytes of a pointee type's name, NUL included */
#define TRITON_ELEM_OTHER "?"       /* a pointer to a type of no plain name */

/* The arguments a compiled kernel kept, in parameter order. */
struct triton_sig {
	unsigned n;
	char name[TRITON_MAX_ARGS][TRITON_NAME_MAX];
	uint8_t size[TRITON_MAX_ARGS];  /* bytes of the parameter */
	/* a pointer's element type as the IR names it ("i32", "bf16"), or
	 * TRITON_ELEM_OTHER; "" for a value */
	char elem[TRITON_MAX_ARGS][TRITON_ELEM_MAX];
};

/*
 * Read the signature of `kernel` from Triton IR text (len bytes, not
 * NUL-terminated).  0, or -1 with why: no `tt.func ... @kernel(` line,
 * an argument without a name, a type whose size is not known (tensor
 * descriptors), more than TRITON_MAX_ARGS arguments, or text cut short.
 */
int triton_sig_parse(const char *text, size_t len, const char *kernel, struct triton_sig *s,
		     char *why, size_t whylen);

/* The signature of `kernel` in the cache entry `entry` (a directory, at
 * dirfd): read from <entry>/<kernel>.source, else .ttir (a symbolic link,
 * a file that is not regular or over 64 MiB is no IR).  0, 1 when there
 * is no IR, or -1 with why (triton_sig_parse). */
int triton_entry_sig(int dirfd, const char *entry, const char *kernel, struct triton_sig *s,
		     char *why, size_t whylen);

/* Whether s is the signature of a kernel with this parameter table: its
 * sizes, then at most TRITON_MAX_SCRATCH 8-byte parameters.  1 or 0. */
int triton_sig_fits(const struct triton_sig *s, const uint32_t *sizes, unsigned nparams);

/* map[0..ndeclared-1] for s from the declared names (NUL-separated): each
 * one's parameter index in s, or TRITON_DROPPED.  0, or -1 when s keeps an
 * argument not declared, or keeps them in another order. */
int triton_sig_map(const struct triton_sig *s, const char *declared, unsigned ndeclared,
		   int8_t *map);

/* A module's image: the cubin a kernel was loaded from (modules.h). */
struct triton_image {
	uint64_t size;
	uint32_t crc;		/* CRC-32C */
};

/* elem[i]: what declared argument i (placed by map) points at in s, or "". */
void triton_sig_elems(const struct triton_sig *s, const int8_t *map, unsigned ndeclared,
		      char elem[][TRITON_ELEM_MAX]);

/*
 * Place the `ndeclared` argument names of `declared` (NUL-separated, the
 * launcher's order) for a kernel with parameter table sizes[0..nparams-1]:
 * map[i] = its parameter index, or TRITON_DROPPED; elem[i] what it points
 * at ("" where not a pointer, TRITON_ELEM_OTHER where entries disagree).  The entries of
 * `kernel` in the cache directory dir (triton_cache_dir) are read: with
 * img (the cubin the kernel was loaded from), only those whose
 * <kernel>.cubin is that image; without, every one.  Those whose
 * signature fits the table (sizes equal, then at most TRITON_MAX_SCRATCH
 * 8-byte parameters) and names only declared arguments, in order, must
 * give the same map, and (without img) no entry that fits may keep an
 * argument not declared.  0, or -1 with why (no entry fits, entries
 * disagree, another version of the kernel, the directory cannot be read).
 */
int triton_place(const char *dir, const char *kernel, const struct triton_image *img,
		 const uint32_t *sizes, unsigned nparams, const char *declared, unsigned ndeclared,
		 int8_t map[TRITON_MAX_ARGS], char elem[TRITON_MAX_ARGS][TRITON_ELEM_MAX],
		 char *why, size_t whylen);

/* Triton's cache directory, from the environment as Triton reads it: 0, or
 * -1 (no HOME, or a path longer than len). */
int triton_cache_dir(char *buf, size_t len);

#endif

/*
 * profile.h - engine profiles: which kernels write MoE routing (top-k
 * expert ids) or KV-cache slots, and where in a launch's parameters the
 * interesting pointers and sizes are.
 *
 * Rules are data: a small line-based text format (preload/PROFILES.md)
 * parsed here, for the built-in profiles (profiles_builtin.c) and for a
 * user file named by MOEFT_PROFILE alike.  The interposer names a kernel
 * once, asks profile_match() for its rule and caches the answer; for each
 * launch of a matched kernel it calls rule_eval(), which only reads the
 * launch's parameter bytes (no allocation, no locks, never out of bounds).
 */
#ifndef MOEFT_PROFILE_H
#define MOEFT_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#define RULE_MAX_PARAMS 64     /* pN: N < 64 */
#define RULE_MAX_OFF 32767     /* pN@OFF: CUDA allows 32 KiB of parameters */
#define RULE_MAX_FACTORS 3     /* VAL = TERM[(*|/)TERM[(*|/)TERM]] */
#define RULE_MAX_WHEN 4
#define RULE_MAX_POOL 4
#define RULE_PATTERN_MAX 256   /* bytes, NUL included */
#define RULE_LABEL_MAX 32
#define PROFILE_LINE_MAX 1024  /* bytes per line, newline excluded */
#define RULE_TRITON_MAX 1024   /* bytes of triton= names, NULs included */
#define RULE_ELEM_MAX 8        /* bytes of an element type's name, NUL included */

enum rule_kind { RULE_ROUTING = 1, RULE_KV = 2, RULE_STEP = 3 };

/* Element type of the array a REF points at: ids and slots are integers,
 * gating weights floating point. */
enum rule_dtype {
	RULE_I32 = 1, RULE_U32 = 2, RULE_I64 = 3,
	RULE_F32 = 4, RULE_BF16 = 5, RULE_F16 = 6
};

enum rule_term_kind {
	TERM_CONST = 1,  /* k */
	TERM_PARAM = 2,  /* pN[:i32|:i64]: the integer value of param N */
	TERM_FIELD = 3,  /* pN@OFF[:i32|:i64]: an integer inside struct param N */
	TERM_GRID = 4,   /* grid.x|y|z */
	TERM_BLOCK = 5   /* block.x|y|z */
};

struct rule_term {
	uint8_t kind;    /* enum rule_term_kind */
	uint8_t param;
	uint8_t width;   /* 4 or 8; 0: pN read at the param's own size */
	uint8_t axis;    /* 0, 1, 2 for x, y, z */
	uint8_t divide;  /* the value so far is divided by it (exactly), not
			    multiplied; never on the first term */
	uint16_t off;
	int64_t k;
};

/* A VAL: n terms multiplied or divided, left to right; n == 0 means "not
 * given". */
struct rule_val {
	unsigned n;
	struct rule_term t[RULE_MAX_FACTORS];
};

/* A REF: a device pointer held in param N, or 8 bytes at OFF inside the
 * by-value struct param N. */
struct rule_ref {
	uint8_t param;
	uint8_t in_struct;
	uint8_t dtype;   /* enum rule_dtype; 0 for pool pointers */
	uint16_t off;
};

enum rule_op { OP_EQ = 1, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE };

struct rule_cond {
	struct rule_val a, b;
	int op;          /* enum rule_op */
};

struct rule {
	int kind;                        /* enum rule_kind */
	char pattern[RULE_PATTERN_MAX];  /* glob on the mangled kernel name */
	char label[RULE_LABEL_MAX];      /* the `profile NAME` it sits under */
	unsigned line;                   /* where it was defined */
	struct rule_ref ref;             /* routing: ids=; kv: slots= */
	struct rule_val rows, k, experts;          /* routing */
	struct rule_val stride;                    /* routing; kv: optional */
	struct rule_ref weights;         /* routing: weights= (dtype 0: not given) */
	struct rule_val count, block;              /* kv */
	unsigned npool;
	struct rule_ref pool[RULE_MAX_POOL];       /* kv */
	unsigned nwhen;
	struct rule_cond when[RULE_MAX_WHEN];
	/* triton=: the Triton launcher's argument names (NUL-separated); its
	 * pN index these, placed among the parameters by rule_place() */
	unsigned ntriton;
	char triton[RULE_TRITON_MAX];
};

/* Rules in definition order.  Zero-initialise before the first parse. */
struct profile {
	struct rule *rules;
	unsigned count, cap;
};

/*
 * Parse `text` (the format of PROFILES.md) and append its rules to p.
 * `origin` names the text in messages (a path, or "builtin:vllm").
 * Returns 0, or -1 with one line "ORIGIN:LINE:COL: what is wrong" in err;
 * on -1, p holds exactly the rules it held before the call (and, if it held
 * no memory then, none now).
 */
int profile_parse(const char *text, const char *origin, struct profile *p,
		  char *err, size_t errlen);

/* Read a regular file (at most 1 MiB, no NUL bytes) and profile_parse() it. */
int profile_load_file(const char *path, struct profile *p, char *err, size_t errlen);

/* Append a built-in profile: "vllm", "sglang", "torch", "llamacpp", or
 * "auto" (all of them, in that order). */
int profile_builtin(const char *name, struct profile *p, char *err, size_t errlen);

/* What MOEFT_PROFILE names: a built-in name, or a file path (which must
 * contain a '/', so a misspelt built-in name is not taken for a file). */
int profile_load(const char *spec, struct profile *p, char *err, size_t errlen);

/* NULL-terminated list of the built-in names, "auto" first. */
extern const char *const profile_builtin_names[];

/* The rule text of a built-in profile, or NULL for an unknown name. */
const char *profile_builtin_text(const char *name);

void profile_free(struct profile *p);

/* Glob match of a whole name: '*' any run (also empty), '?' any one byte,
 * everything else itself.  Iterative, O(len(pattern) * len(name)) at worst. */
int profile_glob(const char *pattern, const char *name);

/* Index of the first rule whose pattern matches kernel_name, or -1.  That
 * rule owns the kernel: later rules are never consulted for it. */
int profile_match(const struct profile *p, const char *kernel_name);

/* "LABEL:LINE" of rule `rule`, for messages: buf. */
const char *profile_rule_label(const struct profile *p, int rule, char *buf, size_t len);

/* What a rule resolved to for one launch. */
struct rule_hit {
	int kind;            /* enum rule_kind */
	int dtype;           /* of the ids / slots elements */
	uint64_t ptr;        /* device pointer of the ids / slots array */
	int64_t rows, k;     /* routing: rows x k ids are written ... */
	int64_t stride;      /* ... row r at ptr + r * stride elements (default k) */
	int64_t experts;     /* routing: number of experts, -1 when not given */
	uint64_t weights;    /* routing: device pointer of the rows x k gating
				weights (dense: row r at r * k), 0 when the rule
				names none or the launch passed NULL */
	int wdtype;          /* their enum rule_dtype; 0 with weights 0 */
	int64_t count;       /* kv: slot entries at ptr */
	int64_t block;       /* kv: slots per KV block (slot / block = block index);
				1 when the rule names none (it then names no stride) */
	/* kv: stride is the bytes from one block to the next in each pool, 0
	 * when the rule does not say (the pools' chunks are then hashed) */
	unsigned npool;
	uint64_t pool[RULE_MAX_POOL]; /* kv: device pointers into the KV pool(s) */
};

/*
 * Resolve rule r against a launch.  args[i] points at param i's bytes;
 * param_sizes[i] is its size in bytes (cuFuncGetParamInfo), or
 * param_sizes == NULL when unknown: every param then counts as 8 bytes (the
 * caller vouches that 8 bytes are readable at each args[i]) and a bare pN
 * VAL is read as a 4-byte int.  grid/block: the launch's
 * dimensions.  Returns
 *    1  the rule applies: *out filled;
 *    0  a when= condition is false, or the ids/slots pointer is NULL;
 *   -1  the rule does not fit this kernel: a param index >= nparams, a read
 *       past a param's size, a pointer param that is not 8 bytes, a
 *       product that overflows, a division by a value below 1 or with a
 *       remainder, or an impossible value (rows or count < 0,
 *       k, stride, block or experts < 1, stride < k).  Log once and stop
 *       evaluating the rule for that kernel.
 */
int rule_eval(const struct rule *r, void *const *args, const uint32_t *param_sizes,
	      unsigned nparams, const unsigned grid[3], const unsigned block[3],
	      struct rule_hit *out);

/* One parameter a rule reads, for checking rules against kernels. */
enum rule_use_what {
	USE_POINTER = 1,	/* pN: a device pointer */
	USE_FIELD_POINTER,	/* pN@OFF: 8 bytes of a by-value struct */
	USE_INT,		/* pN[:i32|:i64]: an integer */
	USE_FIELD_INT		/* pN@OFF[:i64]: an integer inside a struct */
};

struct rule_use {
	const char *key;	/* "ids", "slots", "rows", ..., "pool", "when" */
	unsigned param;
	int what;		/* enum rule_use_what */
	unsigned width;		/* bytes read; USE_INT: 0 (the param's own), 4, 8 */
	unsigned off;		/* the fields' */
	int dtype;		/* ids=, slots=, weights=: enum rule_dtype; 0 otherwise */
};

/* Call fn for each parameter rule r reads, in the order of its text,
 * until fn returns non-zero: that value, else 0. */
int rule_each_use(const struct rule *r, int (*fn)(const struct rule_use *u, void *arg),
		  void *arg);

/*
 * Whether rule r's positions fit a kernel whose parameter table (sizes in
 * bytes, by ordinal, as cuobjdump or cuFuncGetParamInfo give it) is
 * sizes[0..nparams): every param it reads exists, a pointer is 8 bytes, a
 * bare pN an integer of 1, 2, 4 or 8 bytes, pN:i32 / pN:i64 exactly 4 / 8,
 * and a field lies inside its struct.  rule_eval() applies the same
 * rules to each launch.  0, or -1 with the first misfit in why ("k: p6
 * read as 8 bytes, the parameter is 4").
 */
int rule_fits(const struct rule *r, const uint32_t *sizes, unsigned nparams, char *why,
	      size_t len);

/*
 * The plain rule a triton= rule is for one compiled kernel: each pN
 * (an index into r->triton) replaced by its parameter index map[N]
 * (triton.h), and an argument Triton dropped by what it was: an integer
 * by the constant 1, weights= by none.  elem[N]: what argument N points at
 * as Triton's IR names it ("i32", "i64", "f32", "bf16", "f16"; "?" a
 * pointer to what is not known; "" no pointer, or dropped), which must be
 * what the rule reads for ids=, slots= and weights=
 * (u32 is "i32": the IR's integers carry no sign).  0, or -1 with why when
 * ids=, slots= or a pool= argument was dropped (None: nothing to read), an
 * element type is not the rule's, or a value (rows=, k=, when=, ...) reads
 * an argument the IR shows a pointer.
 */
int rule_place(const struct rule *r, const int8_t *map, const char (*elem)[RULE_ELEM_MAX],
	       struct rule *out, char *why, size_t len);

/* Write r back in canonical text form (one line, no newline); returns the
 * length it needed, like snprintf. */
int rule_format(const struct rule *r, char *out, size_t len);

#endif

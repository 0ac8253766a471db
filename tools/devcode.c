/*
 * devcode.c - the kernels' parameter tables in a cubin, a fatbin or a
 * host ELF's .nv_fatbin section (devcode.h).
 *
 * The layouts, as nvcc 13.0 writes them and the driver reads them (all
 * little-endian):
 *  - a cubin is a 64-bit ELF for EM_CUDA (190); each kernel has a
 *    section ".nv.info.NAME" of attributes: a byte of format, a byte of
 *    attribute, then two bytes of value, or for format 4 (EIFMT_SVAL)
 *    their length and that many bytes.  Attribute 0x17 (EIATTR_KPARAM_INFO)
 *    is one parameter: u32 index, u16 ordinal, u16 offset, u32 whose bits
 *    18..31 are its size in bytes.
 *  - a fatbin is a run of containers: u32 magic 0xba55ed50, u16 version,
 *    u16 header size, u64 body size; the body a run of entries: u16 kind
 *    (1 PTX, 2 cubin), u16 version, u32 header size, u64 payload size,
 *    and at 16 the compressed size, at 28 the architecture, at 40 the
 *    flags (0x2000 LZ4, 0x8000 zstd), at 56 the inflated size.
 *  - a host ELF keeps its fatbins in the section ".nv_fatbin".
 * A file is read with pread, a container or a cubin at a time, so a
 * library of a gigabyte needs no more memory than its largest container.
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devcode.h"

#define EM_CUDA_ELF 190
#define FATBIN_MAGIC 0xba55ed50u
#define FATBIN_HEADER 16
#define ENTRY_HEADER 64		/* the bytes of an entry's header read here */
#define ENTRY_PTX 1
#define ENTRY_CUBIN 2
#define FLAG_LZ4 0x2000u
#define FLAG_ZSTD 0x8000u
#define EIFMT_SVAL 4
#define EIATTR_KPARAM_INFO 0x17
#define KPARAM_BYTES 12
#define INFO_PREFIX ".nv.info."

/* Bytes of a file, or of memory (a cubin inflated or inside a container). */
struct src {
	const uint8_t *mem;	/* NULL: read fd */
	int fd;
	uint64_t size;
};

struct walk {
	devcode_each each;
	void *arg;
	struct devcode_file *f;
	char *why;
	size_t len;
	uint32_t sizes[DEVCODE_MAX_PARAMS];
	uint32_t offsets[DEVCODE_MAX_PARAMS];
	uint8_t seen[DEVCODE_MAX_PARAMS];
};

static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const uint8_t *p) { return get16(p) | (uint32_t)get16(p + 2) << 16; }
static uint64_t get64(const uint8_t *p) { return get32(p) | (uint64_t)get32(p + 4) << 32; }

static int fail(struct walk *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(struct walk *w, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(w->why, w->len, fmt, ap);
	va_end(ap);
	return -1;
}

/* Whether [off, off + n) lies inside the source. */
static int inside(const struct src *s, uint64_t off, uint64_t n)
{
	return off <= s->size && n <= s->size - off;
}

/* The bytes [off, off + n) of s: into memory of s, or read into *owned
 * (the caller frees it).  NULL when outside s or unreadable, with why. */
static const uint8_t *view(struct walk *w, const struct src *s, uint64_t off, uint64_t n,
			   uint8_t **owned, const char *what)
{
	uint8_t *buf;
	uint64_t done = 0;

	*owned = NULL;
	if (!inside(s, off, n)) {
		fail(w, "%s at offset %" PRIu64 " (%" PRIu64 " bytes): past the end (%" PRIu64
		     " bytes)", what, off, n, s->size);
		return NULL;
	}
	if (s->mem)
		return s->mem + off;
	if (!(buf = malloc(n ? n : 1))) {
		fail(w, "%s: %" PRIu64 " bytes: out of memory", what, n);
		return NULL;
	}
	while (done < n) {
		ssize_t r = pread(s->fd, buf + done, n - done, (off_t)(off + done));

		if (r <= 0) {
			fail(w, "%s: %s", what, r ? strerror(errno) : "the file shrank");
			free(buf);
			return NULL;
		}
		done += (uint64_t)r;
	}
	return *owned = buf;
}

/* ---- a cubin's kernels ------------------------------------------------------- */

/* One kernel's ".nv.info.NAME" attributes: its table to the callback. */
static int kernel_info(struct walk *w, const char *name, const uint8_t *d, uint64_t n,
		       unsigned sm)
{
	unsigned nparams = 0, end = 0;
	uint64_t p = 0;

	for (const char *c = name; *c; c++)
		if (*c < 0x21 || *c > 0x7e)
			return fail(w, "a kernel name with the byte 0x%02x: not a symbol",
				    (unsigned char)*c);
	if (!*name)
		return fail(w, "an empty kernel name");
	memset(w->seen, 0, sizeof w->seen);
	while (p < n) {
		uint64_t vlen = 0;

		if (n - p < 4)
			return fail(w, "%s: an attribute cut at byte %" PRIu64, name, p);
		if (d[p] == EIFMT_SVAL) {
			vlen = get16(d + p + 2);
			if (vlen > n - p - 4)
				return fail(w, "%s: attribute 0x%02x at byte %" PRIu64 " passes its "
					    "section", name, d[p + 1], p);
		} else if (d[p] < 1 || d[p] > 3) {
			return fail(w, "%s: attribute format %u at byte %" PRIu64 " is unknown",
				    name, d[p], p);
		}
		if (d[p] == EIFMT_SVAL && d[p + 1] == EIATTR_KPARAM_INFO) {
			const uint8_t *v = d + p + 4;
			unsigned ord = get16(v + 4);

			if (vlen < KPARAM_BYTES)
				return fail(w, "%s: a parameter of %" PRIu64 " bytes (want %d)", name,
					    vlen, KPARAM_BYTES);
			if (ord >= DEVCODE_MAX_PARAMS || w->seen[ord])
				return fail(w, "%s: parameter ordinal %u is %s", name, ord,
					    ord >= DEVCODE_MAX_PARAMS ? "too large" : "given twice");
			w->seen[ord] = 1;
			w->offsets[ord] = get16(v + 6);
			w->sizes[ord] = get32(v + 8) >> 18;
			if (ord >= nparams)
				nparams = ord + 1;
		}
		p += 4 + vlen;
	}
	for (unsigned i = 0; i < nparams; i++) {
		if (!w->seen[i])
			return fail(w, "%s: no parameter %u of %u", name, i, nparams);
		if (!w->sizes[i] || w->offsets[i] < end ||
		    w->offsets[i] + w->sizes[i] > DEVCODE_PARAM_BYTES)
			return fail(w, "%s: parameter %u (offset %u, %u bytes) overlaps the one "
				    "before, is empty or passes %d bytes", name, i, w->offsets[i],
				    w->sizes[i], DEVCODE_PARAM_BYTES);
		end = w->offsets[i] + w->sizes[i];
	}
	return w->each(&(struct devcode_kernel){ name, sm, nparams, w->offsets, w->sizes },
		       w->arg);
}

/* A section's name from the section-name table: NULL when not inside. */
static const char *section_name(const uint8_t *names, uint64_t nlen, uint32_t at)
{
	if (at >= nlen || !memchr(names + at, '\0', nlen - at))
		return NULL;
	return (const char *)names + at;
}

typedef int (*section_fn)(struct walk *w, const struct src *s, const char *name,
			  const Elf64_Shdr *sh, unsigned sm);

/* A cubin's architecture (90: sm_90) from its ELF header: e_flags bits
 * 8..15 from ABI version 8 (CUDA 12), bits 0..7 before. */
static unsigned cubin_sm(const uint8_t *h)
{
	uint32_t flags = get32(h + 48);

	return h[EI_ABIVERSION] >= 8 ? (flags >> 8) & 0xff : flags & 0xff;
}

/* Every section of the ELF in s, by name, to fn.  cuda: s must be a
 * cubin (*sm its architecture), else a host ELF. */
static int elf_sections(struct walk *w, const struct src *s, int cuda, section_fn fn,
			unsigned *sm_out)
{
	uint8_t *own_h = NULL, *own_sh = NULL, *own_n = NULL;
	const uint8_t *h, *sh, *names;
	uint64_t shoff, nlen;
	unsigned shnum, strndx, sm;
	int ret = -1;
	Elf64_Shdr hdr;

	if (!(h = view(w, s, 0, sizeof(Elf64_Ehdr), &own_h, "the ELF header")))
		return -1;
	if (memcmp(h, ELFMAG, SELFMAG) || h[EI_CLASS] != ELFCLASS64 || h[EI_DATA] != ELFDATA2LSB) {
		ret = fail(w, "not a 64-bit little-endian ELF file");
		goto out;
	}
	if ((get16(h + 18) == EM_CUDA_ELF) != cuda) {
		ret = fail(w, cuda ? "an ELF file for machine %u, not a cubin (CUDA: %d)" :
			   "a cubin (machine %u) where a host ELF was expected", get16(h + 18),
			   EM_CUDA_ELF);
		goto out;
	}
	if (cuda && (sm = cubin_sm(h)) < 10) {
		ret = fail(w, "a cubin for sm_%u: not an architecture (its header is damaged)", sm);
		goto out;
	}
	sm = cuda ? sm : 0;
	shoff = get64(h + 40);
	shnum = get16(h + 60);
	strndx = get16(h + 62);
	if (get16(h + 58) != sizeof(Elf64_Shdr) || !shnum || strndx >= shnum) {
		ret = fail(w, "section headers of %u bytes, %u sections, names in section %u: not "
			   "a layout read here", get16(h + 58), shnum, strndx);
		goto out;
	}
	if (!(sh = view(w, s, shoff, (uint64_t)shnum * sizeof hdr, &own_sh, "the section headers")))
		goto out;
	memcpy(&hdr, sh, sizeof hdr);
	if (hdr.sh_type != SHT_NULL) {
		ret = fail(w, "section 0 is of type %u, not SHT_NULL: no section table", hdr.sh_type);
		goto out;
	}
	memcpy(&hdr, sh + (size_t)strndx * sizeof hdr, sizeof hdr);
	nlen = hdr.sh_size;
	if (!(names = view(w, s, hdr.sh_offset, nlen, &own_n, "the section names")))
		goto out;
	if (hdr.sh_type != SHT_STRTAB || !nlen || names[0]) {
		ret = fail(w, "section %u, the section names, is no string table", strndx);
		goto out;
	}
	if (sm_out)
		*sm_out = sm;
	ret = 0;
	for (unsigned i = 1; i < shnum && !ret; i++) {
		const char *name;

		memcpy(&hdr, sh + (size_t)i * sizeof hdr, sizeof hdr);
		if (!(name = section_name(names, nlen, hdr.sh_name)))
			ret = fail(w, "section %u: its name is outside the name table", i);
		else if (hdr.sh_type != SHT_NOBITS)
			ret = fn(w, s, name, &hdr, sm);
	}
out:
	free(own_h);
	free(own_sh);
	free(own_n);
	return ret;
}

static int cubin_section(struct walk *w, const struct src *s, const char *name,
			 const Elf64_Shdr *sh, unsigned sm)
{
	const uint8_t *d;
	uint8_t *own;
	int ret;

	if (strncmp(name, INFO_PREFIX, sizeof INFO_PREFIX - 1))
		return 0;
	if (!(d = view(w, s, sh->sh_offset, sh->sh_size, &own, name)))
		return -1;
	ret = kernel_info(w, name + sizeof INFO_PREFIX - 1, d, sh->sh_size, sm);
	free(own);
	return ret;
}

static void add_sm(struct devcode_file *f, unsigned sm)
{
	unsigned i = 0;

	while (i < f->nsms && f->sms[i] < sm)
		i++;
	if ((i < f->nsms && f->sms[i] == sm) || f->nsms == sizeof f->sms / sizeof f->sms[0])
		return;
	memmove(f->sms + i + 1, f->sms + i, (f->nsms - i) * sizeof f->sms[0]);
	f->sms[i] = sm;
	f->nsms++;
}

static int cubin_walk(struct walk *w, const struct src *s)
{
	unsigned sm;
	int ret = elf_sections(w, s, 1, cubin_section, &sm);

	if (ret)
		return ret;
	add_sm(w->f, sm);
	w->f->cubins++;
	return 0;
}

/* ---- fatbins --------------------------------------------------------------- */

/* The inflaters, loaded once (moeft is single-threaded here). */
static size_t (*zstd_decompress)(void *, size_t, const void *, size_t);
static unsigned (*zstd_is_error)(size_t);
static int (*lz4_decompress)(const char *, char *, int, int);

static int load(struct walk *w, const char *soname, const char *a, void **fa, const char *b,
		void **fb)
{
	void *lib, *pa, *pb = NULL;

	if (*fa)
		return 0;
	if (!(lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL)))
		return fail(w, "a compressed cubin needs %s: %s", soname, dlerror());
	pa = dlsym(lib, a);
	if (b)
		pb = dlsym(lib, b);
	if (!pa || (b && !pb)) {
		dlclose(lib);
		return fail(w, "%s has no %s", soname, pa ? b : a);
	}
	*fa = pa;	/* the library stays loaded for the process */
	if (b)
		*fb = pb;
	return 0;
}

/* The cubin of a compressed entry, inflated into *out. */
static int inflate(struct walk *w, const uint8_t *e, const uint8_t *payload, uint64_t plen,
		   uint8_t **out, uint64_t *olen)
{
	uint64_t flags = get64(e + 40), full = get64(e + 56), clen = get32(e + 16);

	if (!clen || clen > plen)
		return fail(w, "a compressed cubin of %" PRIu64 " bytes in a payload of %" PRIu64,
			    clen, plen);
	if (!full || full > DEVCODE_CUBIN_MAX)
		return fail(w, "a compressed cubin of %" PRIu64 " bytes inflated (at most %u)", full,
			    DEVCODE_CUBIN_MAX);
	if (flags & FLAG_ZSTD) {
		if (load(w, "libzstd.so.1", "ZSTD_decompress", (void **)&zstd_decompress,
			 "ZSTD_isError", (void **)&zstd_is_error) < 0)
			return -1;
	} else if (load(w, "liblz4.so.1", "LZ4_decompress_safe", (void **)&lz4_decompress, NULL,
			NULL) < 0) {
		return -1;
	}
	if (!(*out = malloc(full)))
		return fail(w, "%" PRIu64 " bytes for a cubin: out of memory", full);
	if (flags & FLAG_ZSTD) {
		size_t r = zstd_decompress(*out, full, payload, clen);

		if (zstd_is_error(r) || r != full)
			goto bad;
	} else if (clen > INT32_MAX ||
		   lz4_decompress((const char *)payload, (char *)*out, (int)clen, (int)full) !=
		   (int)full) {
		goto bad;
	}
	*olen = full;
	return 0;
bad:
	free(*out);
	*out = NULL;
	return fail(w, "%s-compressed cubin does not inflate to its %" PRIu64 " bytes",
		    flags & FLAG_ZSTD ? "a zstd" : "an LZ4", full);
}

/* Prefix w->why with where it happened: -1. */
static int within(struct walk *w, const char *where)
{
	char inner[400];

	snprintf(inner, sizeof inner, "%s", w->why);
	return fail(w, "%s: %s", where, inner);
}

/* One cubin entry of a container: e its header, hlen + plen its bytes. */
static int cubin_entry(struct walk *w, const uint8_t *e, uint64_t hlen, uint64_t plen)
{
	struct src cubin = { .mem = e + hlen, .size = plen };
	uint8_t *inflated = NULL;
	int ret;

	if (get64(e + 40) & (FLAG_LZ4 | FLAG_ZSTD)) {
		if (inflate(w, e, e + hlen, plen, &inflated, &cubin.size) < 0)
			return -1;
		cubin.mem = inflated;
	}
	ret = cubin_walk(w, &cubin);
	free(inflated);
	return ret;
}

/* The entries of one container's body. */
static int container(struct walk *w, const uint8_t *b, uint64_t n)
{
	uint64_t p = 0;

	while (p < n) {
		const uint8_t *e = b + p;
		uint64_t hlen, plen;
		int ret;

		if (n - p < ENTRY_HEADER || (hlen = get32(e + 4)) < ENTRY_HEADER || hlen > n - p ||
		    (plen = get64(e + 8)) > n - p - hlen)
			return fail(w, "an entry at byte %" PRIu64 " passes the container's end (%" PRIu64
				    " bytes)", p, n);
		if (get16(e) != ENTRY_PTX && get16(e) != ENTRY_CUBIN)
			return fail(w, "an entry of kind %u at byte %" PRIu64 ", neither PTX (%d) nor "
				    "a cubin (%d)", get16(e), p, ENTRY_PTX, ENTRY_CUBIN);
		w->f->ptx += get16(e) == ENTRY_PTX;
		ret = get16(e) == ENTRY_CUBIN ? cubin_entry(w, e, hlen, plen) : 0;
		if (ret < 0) {
			char where[80];

			snprintf(where, sizeof where, "its sm_%u cubin at byte %" PRIu64,
				 get32(e + 28), p);
			return within(w, where);
		}
		if (ret)
			return ret;
		p += hlen + plen;
	}
	return 0;
}

/* The containers in [off, off + n) of s, each 8-byte aligned (a word of
 * zeros at most between two), at least one entry in all. */
static int fatbin_walk(struct walk *w, const struct src *s, uint64_t off, uint64_t n)
{
	uint64_t p = 0, entries = w->f->cubins + w->f->ptx;

	if (!inside(s, off, n))
		return fail(w, "the fatbin at offset %" PRIu64 " (%" PRIu64 " bytes) passes the "
			    "end of the file", off, n);
	while (p < n) {
		uint8_t head[FATBIN_HEADER + 8], *own;
		const uint8_t *h, *body;
		uint64_t blen, have = n - p < sizeof head ? n - p : sizeof head;
		int ret;

		if (!(h = view(w, s, off + p, have, &own, "a fatbin container")))
			return -1;
		memcpy(head, h, have);
		free(own);
		if (p && have >= 8 && !get64(head)) {
			p += 8;		/* the padding after a container */
			memmove(head, head + 8, have -= 8);
		}
		if (have < FATBIN_HEADER || get32(head) != FATBIN_MAGIC ||
		    get16(head + 6) < FATBIN_HEADER || get16(head + 6) > n - p)
			return fail(w, "no fatbin container at byte %" PRIu64 " of %" PRIu64, p, n);
		blen = get64(head + 8);
		p += get16(head + 6);
		if (blen > n - p)
			return fail(w, "the fatbin container at byte %" PRIu64 " has %" PRIu64 " bytes, "
				    "%" PRIu64 " are left", p - get16(head + 6), blen, n - p);
		if (!(body = view(w, s, off + p, blen, &own, "a fatbin container")))
			return -1;
		ret = container(w, body, blen);
		free(own);
		if (ret < 0) {
			char where[80];

			snprintf(where, sizeof where, "the fatbin container at offset %" PRIu64,
				 off + p - get16(head + 6));
			return within(w, where);
		}
		if (ret)
			return ret;
		p += blen;
	}
	if (w->f->cubins + w->f->ptx == entries)
		return fail(w, "a fatbin of %" PRIu64 " bytes at offset %" PRIu64 " with no cubin "
			    "and no PTX", n, off);
	return 0;
}

static int host_section(struct walk *w, const struct src *s, const char *name,
			const Elf64_Shdr *sh, unsigned sm)
{
	(void)sm;
	return strcmp(name, ".nv_fatbin") ? 0 : fatbin_walk(w, s, sh->sh_offset, sh->sh_size);
}

/* ---- a file ---------------------------------------------------------------- */

int devcode_is_binary(const void *head, size_t n)
{
	return (n >= SELFMAG && !memcmp(head, ELFMAG, SELFMAG)) ||
	       (n >= 4 && get32(head) == FATBIN_MAGIC);
}

int devcode_read(int fd, devcode_each each, void *arg, struct devcode_file *f, char *why,
		 size_t len)
{
	struct walk *w = malloc(sizeof *w);
	struct src s = { .fd = fd };
	uint8_t head[20] = { 0 };
	struct stat st;
	ssize_t got;
	int ret;

	memset(f, 0, sizeof *f);
	if (!w) {
		snprintf(why, len, "out of memory");
		return -1;
	}
	*w = (struct walk){ .each = each, .arg = arg, .f = f, .why = why, .len = len };
	if (fstat(fd, &st) < 0 || (got = pread(fd, head, sizeof head, 0)) < 0) {
		ret = fail(w, "%s", strerror(errno));
		goto out;
	}
	s.size = (uint64_t)st.st_size;
	if (!devcode_is_binary(head, (size_t)got)) {
		ret = fail(w, "not a cubin, fatbin or ELF file");
	} else if (get32(head) == FATBIN_MAGIC) {
		f->kind = DEVCODE_FATBIN;
		ret = fatbin_walk(w, &s, 0, s.size);
	} else if (got >= 20 && get16(head + 18) == EM_CUDA_ELF) {
		f->kind = DEVCODE_CUBIN;
		ret = cubin_walk(w, &s);
	} else {
		f->kind = DEVCODE_HOST_ELF;
		ret = elf_sections(w, &s, 0, host_section, NULL);
	}
out:
	free(w);
	return ret;
}

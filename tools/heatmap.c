/*
 * heatmap.c - the SVG picture of expert usage (see heatmap.h).
 *
 * The size is bounded: cells shrink from MAX_CELL to MIN_CELL px, their
 * width and height apart, so that the grid fits about GRID_W x GRID_H px
 * (512 experts: 3 px wide); only models beyond that make the picture grow.  Colours are interpolated in
 * OKLab, whose lightness follows perception, with the ramp's stops placed
 * by their lightness: equal steps of share are equal steps of lightness.
 * The log path is the only text not made here, and all text is escaped
 * (bytes that are not UTF-8 become U+FFFD), so the file always parses.
 */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "guard.h"
#include "heatmap.h"
#include "utf8.h"

#define MAX_CELL 16u
#define MIN_CELL 3u
#define GRID_W 1536u
#define GRID_H 1024u
#define GRID_X 72u		/* left of the grid: layer numbers, axis title */
#define GRID_Y 96u		/* above it: title lines, expert numbers */
#define MIN_WIDTH 600u		/* room for the title lines */
#define LEGEND_W 240u
#define FONT_PX 11u
#define SHADES 11u		/* stops of the legend's gradient */

/* ---- colour ----------------------------------------------------------- */

struct lab {
	double L, a, b;
};

/* Light yellow, teal, dark blue: lightness strictly falling. */
static const uint32_t ramp_rgb[] = { 0xffffd9, 0x41b6c4, 0x081d58 };
#define NSTOPS (sizeof ramp_rgb / sizeof ramp_rgb[0])

static double srgb_to_linear(double c)
{
	return c <= 0.04045 ? c / 12.92 : pow((c + 0.055) / 1.055, 2.4);
}

static double linear_to_srgb(double c)
{
	c = c < 0 ? 0 : c > 1 ? 1 : c;
	return c <= 0.0031308 ? 12.92 * c : 1.055 * pow(c, 1 / 2.4) - 0.055;
}

/* OKLab's published matrices: linear sRGB -> cone response -> Lab. */
static struct lab rgb_to_lab(uint32_t rgb)
{
	double r = srgb_to_linear((rgb >> 16 & 0xff) / 255.0);
	double g = srgb_to_linear((rgb >> 8 & 0xff) / 255.0);
	double b = srgb_to_linear((rgb & 0xff) / 255.0);
	double l = cbrt(0.4122214708 * r + 0.5363325363 * g + 0.0514459929 * b);
	double m = cbrt(0.2119034982 * r + 0.6806995451 * g + 0.1073969566 * b);
	double s = cbrt(0.0883024619 * r + 0.2817188376 * g + 0.6299787005 * b);

	return (struct lab){ 0.2104542553 * l + 0.7936177850 * m - 0.0040720468 * s,
			     1.9779984951 * l - 2.4285922050 * m + 0.4505937099 * s,
			     0.0259040371 * l + 0.7827717662 * m - 0.8086757660 * s };
}

static uint32_t lab_to_rgb(struct lab c)
{
	double l = pow(c.L + 0.3963377774 * c.a + 0.2158037573 * c.b, 3);
	double m = pow(c.L - 0.1055613458 * c.a - 0.0638541728 * c.b, 3);
	double s = pow(c.L - 0.0894841775 * c.a - 1.2914855480 * c.b, 3);
	double rgb[3] = { 4.0767416621 * l - 3.3077115913 * m + 0.2309699292 * s,
			  -1.2684380046 * l + 2.6097574011 * m - 0.3413193965 * s,
			  -0.0041960863 * l - 0.7034186147 * m + 1.7076147010 * s };
	uint32_t out = 0;

	for (int i = 0; i < 3; i++)
		out = out << 8 | (uint32_t)lround(255 * linear_to_srgb(rgb[i]));
	return out;
}

/* The ramp at t in [0, 1], 0 the lightest: its lightness falls linearly
 * with t, its hue follows the stops. */
static uint32_t ramp(const struct lab stop[NSTOPS], double t)
{
	double L = stop[0].L + t * (stop[NSTOPS - 1].L - stop[0].L), u;
	size_t i = 0;

	while (i + 2 < NSTOPS && L < stop[i + 1].L)
		i++;
	u = (stop[i].L - L) / (stop[i].L - stop[i + 1].L);
	return lab_to_rgb((struct lab){ L, stop[i].a + u * (stop[i + 1].a - stop[i].a),
					stop[i].b + u * (stop[i + 1].b - stop[i].b) });
}

/* ---- layout ----------------------------------------------------------- */

struct layout {
	unsigned cw, ch;	/* a cell's width and height, px */
	unsigned xstride;	/* an expert number every xstride experts */
	unsigned ystride;	/* a layer number every ystride layers */
	unsigned gw, gh;	/* the grid, px */
	unsigned width, height;
	double min, max;	/* shares at the ends of the colour scale */
	struct lab stop[NSTOPS];
};

static unsigned digits(uint32_t v)
{
	unsigned n = 1;

	while (v >= 10)
		v /= 10, n++;
	return n;
}

/* The smallest power of two that puts labels at least `px` apart. */
static unsigned stride(unsigned cell, unsigned px)
{
	unsigned s = 1;

	while (s * cell < px)
		s *= 2;
	return s;
}

static unsigned cell_px(unsigned room, uint32_t n)
{
	unsigned px = room / n;

	return px < MIN_CELL ? MIN_CELL : px > MAX_CELL ? MAX_CELL : px;
}

static void plan(struct layout *o, const struct hist *h)
{
	o->cw = cell_px(GRID_W, h->experts);
	o->ch = cell_px(GRID_H, h->nlayers);
	/* about 7 px a digit at FONT_PX, plus a gap */
	o->xstride = stride(o->cw, 7 * digits(h->experts - 1) + 6);
	o->ystride = stride(o->ch, FONT_PX + 2);
	o->gw = h->experts * o->cw;
	o->gh = h->nlayers * o->ch;
	o->width = GRID_X + o->gw + 24 > MIN_WIDTH ? GRID_X + o->gw + 24 : MIN_WIDTH;
	o->height = GRID_Y + o->gh + 64;
	o->min = 1;
	o->max = 0;
	for (uint32_t l = 0; l < h->nlayers; l++) {
		for (uint32_t e = 0; e < h->layer[l].n; e++) {
			double v = hist_share(h, l, e);

			o->min = v < o->min ? v : o->min;
			o->max = v > o->max ? v : o->max;
		}
	}
	for (size_t i = 0; i < NSTOPS; i++)
		o->stop[i] = rgb_to_lab(ramp_rgb[i]);
}

static uint32_t colour(const struct layout *o, double share)
{
	return ramp(o->stop, o->max > o->min ? (share - o->min) / (o->max - o->min) : 0);
}

/* ---- SVG -------------------------------------------------------------- */

/* Character data or an attribute value: markup characters as entities,
 * control characters and bytes that are not UTF-8 as U+FFFD. */
static void put_text(FILE *f, const char *str)
{
	const unsigned char *s = (const unsigned char *)str;

	while (*s) {
		size_t n = utf8_len(s);

		if (n == 0 || *s < 0x20 || *s == 0x7f) {
			fputs("&#xfffd;", f);
			n = 1;
		} else if (*s == '&') {
			fputs("&amp;", f);
		} else if (*s == '<') {
			fputs("&lt;", f);
		} else if (*s == '>') {
			fputs("&gt;", f);
		} else if (*s == '"') {
			fputs("&quot;", f);
		} else if (*s == '\'') {
			fputs("&apos;", f);
		} else {
			fwrite(s, 1, n, f);
		}
		s += n;
	}
}

/* A <text> at (x, y); `attr` is markup written as is, `s` is escaped. */
static void text(FILE *f, double x, double y, const char *attr, const char *s)
{
	fprintf(f, "<text x=\"%g\" y=\"%g\"%s>", x, y, attr);
	put_text(f, s);
	fputs("</text>\n", f);
}

static void title(FILE *f, const struct hist *h, const struct heatmap_span *span)
{
	char line[256];
	int n;

	text(f, 16, 22, " class=\"title\"", "Expert usage per layer");
	if (span->first_window == span->last_window)
		n = snprintf(line, sizeof line, "log 0x%016" PRIx64 ", window %" PRIu64,
			     span->log_id, span->first_window);
	else
		n = snprintf(line, sizeof line, "log 0x%016" PRIx64 ", windows %" PRIu64 "-%" PRIu64,
			     span->log_id, span->first_window, span->last_window);
	n += snprintf(line + n, sizeof line - (size_t)n, " (%" PRIu64 " decode window%s), %"
		      PRIu64 " tokens, %" PRIu32 " layers x %" PRIu32 " experts", span->windows,
		      span->windows == 1 ? "" : "s", span->tokens, h->nlayers, h->experts);
	if (span->gaps)
		snprintf(line + n, sizeof line - (size_t)n, "; %" PRIu64 " window%s missing routing",
			 span->gaps, span->gaps == 1 ? "" : "s");
	text(f, 16, 40, "", line);
	text(f, 16, 56, " class=\"note\"", span->log);
}

static void axes(FILE *f, const struct layout *o, const struct hist *h)
{
	char attr[96], num[16];

	text(f, GRID_X + o->gw / 2.0, GRID_Y - 22, " text-anchor=\"middle\"", "expert");
	for (uint32_t e = 0; e < h->experts; e += o->xstride) {
		snprintf(num, sizeof num, "%" PRIu32, e);
		text(f, GRID_X + (e + 0.5) * o->cw, GRID_Y - 6, " text-anchor=\"middle\"", num);
	}
	snprintf(attr, sizeof attr, " transform=\"translate(18 %g) rotate(-90)\" "
		 "text-anchor=\"middle\"", GRID_Y + o->gh / 2.0);
	text(f, 0, 0, attr, "layer");
	for (uint32_t l = 0; l < h->nlayers; l += o->ystride) {
		snprintf(num, sizeof num, "%" PRIu32, l);
		text(f, GRID_X - 4, GRID_Y + (l + 0.5) * o->ch,
		     " text-anchor=\"end\" dy=\"0.35em\"", num);
	}
}

static void cells(FILE *f, const struct layout *o, const struct hist *h)
{
	fputs("<g shape-rendering=\"crispEdges\">\n", f);
	for (uint32_t l = 0; l < h->nlayers; l++) {
		const struct hist_layer *hl = &h->layer[l];

		for (uint32_t e = 0; e < hl->n; e++) {
			double v = hist_share(h, l, e);

			fprintf(f, "<rect class=\"cell\" x=\"%u\" y=\"%u\" width=\"%u\" height=\"%u\" "
				"fill=\"#%06" PRIx32 "\" data-layer=\"%" PRIu32 "\" data-expert=\"%"
				PRIu32 "\" data-share=\"%.6f\"><title>layer %" PRIu32 ", expert %"
				PRIu32 ": %.2f%% (%" PRIu64 " of %" PRIu64 " token-slots)</title></rect>\n",
				GRID_X + e * o->cw, GRID_Y + l * o->ch, o->cw, o->ch,
				colour(o, v), l, e, v, l, e, 100 * v, hl->count[e], hl->total);
		}
	}
	/* a frame, so that the lightest cells stand out from the page */
	fprintf(f, "<rect x=\"%u\" y=\"%u\" width=\"%u\" height=\"%u\" fill=\"none\" "
		"stroke=\"#bbb\"/>\n</g>\n", GRID_X, GRID_Y, o->gw, o->gh);
}

static void legend(FILE *f, const struct layout *o)
{
	unsigned y = GRID_Y + o->gh + 24;
	char pct[32];

	fprintf(f, "<g class=\"legend\" data-min=\"%.6f\" data-max=\"%.6f\">\n"
		"<defs><linearGradient id=\"moeft-ramp\">\n", o->min, o->max);
	for (unsigned i = 0; i < SHADES; i++)
		fprintf(f, "<stop offset=\"%g\" stop-color=\"#%06" PRIx32 "\"/>\n",
			(double)i / (SHADES - 1), ramp(o->stop, (double)i / (SHADES - 1)));
	fputs("</linearGradient></defs>\n", f);
	text(f, GRID_X, y, "", "share of the layer's routed token-slots");
	fprintf(f, "<rect class=\"legend-bar\" x=\"%u\" y=\"%u\" width=\"%u\" height=\"12\" "
		"fill=\"url(#moeft-ramp)\" stroke=\"#999\" stroke-width=\"0.5\"/>\n",
		GRID_X, y + 6, LEGEND_W);
	snprintf(pct, sizeof pct, "%.2f%%", 100 * o->min);
	text(f, GRID_X, y + 32, " class=\"legend-min\"", pct);
	snprintf(pct, sizeof pct, "%.2f%%", 100 * o->max);
	text(f, GRID_X + LEGEND_W, y + 32, " class=\"legend-max\" text-anchor=\"end\"", pct);
	fputs("</g>\n", f);
}

static void draw(FILE *f, const struct hist *h, const struct heatmap_span *span)
{
	struct layout o;

	plan(&o, h);
	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%u\" height=\"%u\" "
		"viewBox=\"0 0 %u %u\">\n", o.width, o.height, o.width, o.height);
	fputs("<title>moeft: expert usage per layer of ", f);
	put_text(f, span->log);
	fputs("</title>\n", f);
	fprintf(f, "<style>text{font-family:sans-serif;font-size:%upx;fill:#222}"
		".title{font-size:15px;font-weight:bold}.note{font-size:10px;fill:#666}</style>\n"
		"<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n", FONT_PX);
	title(f, h, span);
	axes(f, &o, h);
	cells(f, &o, h);
	legend(f, &o);
	fputs("</svg>\n", f);
}

/* ---- the file --------------------------------------------------------- */

static int fail(char *msg, size_t len, const char *path, const char *why)
{
	snprintf(msg, len, "cannot write heatmap %s: %s", path, why);
	return -1;
}

int heatmap_check_path(const char *path, const struct stat *log, char *msg, size_t len)
{
	struct stat st;
	char *copy, why[300];
	const char *dir;
	int ret = 0;

	if (!*path) {
		snprintf(msg, len, "--heatmap: the path is empty");
		return -1;
	}
	if (path[strlen(path) - 1] == '/')
		return fail(msg, len, path, "not a file name");
	if (stat(path, &st) == 0) {
		if (!S_ISREG(st.st_mode))
			return fail(msg, len, path, "not a regular file");
		if (guard_check(path, log, why, sizeof why) < 0) {
			snprintf(msg, len, "--heatmap %s", why);
			return -1;
		}
	} else if (errno != ENOENT) {
		return fail(msg, len, path, strerror(errno));
	}
	if (!(copy = strdup(path)))
		return fail(msg, len, path, strerror(ENOMEM));
	dir = dirname(copy);
	/* the temporary file is made in the same directory */
	if (access(dir, W_OK | X_OK) < 0) {
		snprintf(why, sizeof why, "%s: %s", dir, strerror(errno));
		ret = fail(msg, len, path, why);
	}
	free(copy);
	return ret;
}

int heatmap_write(const char *path, const struct hist *h, const struct heatmap_span *span,
		  char *msg, size_t len)
{
	static const char suffix[] = ".XXXXXX";
	size_t n = strlen(path);
	char *tmp = malloc(n + sizeof suffix);
	FILE *f = NULL;
	mode_t mask;
	int fd, err = 0;

	if (!tmp)
		return fail(msg, len, path, strerror(ENOMEM));
	memcpy(tmp, path, n);
	memcpy(tmp + n, suffix, sizeof suffix);
	if ((fd = mkstemp(tmp)) < 0) {
		err = errno;
		free(tmp);
		return fail(msg, len, path, strerror(err));
	}
	/* mkstemp makes it 0600: give the picture the mode of any new file */
	mask = umask(0);
	umask(mask);
	if (fchmod(fd, 0666 & ~mask) < 0 || !(f = fdopen(fd, "w"))) {
		err = errno;
		close(fd);
	} else {
		errno = 0;
		draw(f, h, span);
		if (fflush(f) != 0 || ferror(f) || fsync(fd) < 0)
			err = errno ? errno : EIO;
		if (fclose(f) != 0 && !err)
			err = errno;
	}
	if (!err && rename(tmp, path) < 0)
		err = errno;
	if (err)
		unlink(tmp);
	free(tmp);
	return err ? fail(msg, len, path, strerror(err)) : 0;
}

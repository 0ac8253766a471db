/*
 * check_routing.c - does a log hold exactly the routing a serve run's
 * truth file lists?  check_routing TRUTH WAL eager|graph
 *
 * The preload logs one ROUTING record per topkGating launch, with no step
 * or layer yet (that is next round), so records are placed by order: each
 * of serve's two groups (sequence i is in group i % 2, its rows ascending)
 * launches step after step, layer after layer, on its own stream, and a
 * stream's appends reach the log in its order; the two streams interleave
 * freely.  So the log, read in LSN order, must be a merge of the two
 * groups' expected sequences.  A record matches a group's next expected
 * launch when its row count is the launch's (eager: the real rows; graph:
 * the group's largest batch, real rows first, then padding that the truth
 * leaves out and that is not compared) and its real rows hold the truth's
 * ids.  The two heads are tried in order, group 0 first: they are equal
 * only if both groups routed identically, where either choice fits.
 * Exit status 0 when every record matched and nothing is left over.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "record.h"
#include "wal.h"

struct launch {
	unsigned real, rows;	/* rows compared, rows the launch has */
	size_t ids;		/* index of its first id in the id pool */
};

struct queue {
	struct launch *l;
	size_t n, cap, next;
};

static int *pool;
static size_t npool, pool_cap;

static void *grow(void *p, size_t *cap, size_t need, size_t size)
{
	if (need <= *cap)
		return p;
	*cap = need * 2;
	if (!(p = realloc(p, *cap * size))) {
		perror("check_routing");
		exit(2);
	}
	return p;
}

static unsigned field(const char *line, const char *key)
{
	const char *p = strstr(line, key);

	return p ? (unsigned)strtoul(p + strlen(key), NULL, 10) : 0;
}

/* Read the truth into one queue per group: 0, or -1. */
static int read_truth(const char *path, int graph, struct queue q[2], unsigned *topk)
{
	unsigned seqs, layers, rows[4096], nrows = 0, g, i, j;
	static char line[1 << 20];
	FILE *f = fopen(path, "r");

	if (!f || !fgets(line, sizeof line, f))
		return -1;
	*topk = field(line, " topk=");
	seqs = field(line, " seqs=");
	layers = field(line, " layers=");
	while (fgets(line, sizeof line, f)) {
		char *p = line, *end;

		if (strncmp(line, "rows", 4) == 0) {
			for (nrows = 0, p += 4; nrows < 4096; nrows++) {
				unsigned long v = strtoul(p, &end, 10);

				if (end == p)
					break;
				rows[nrows] = (unsigned)v;
				p = end;
			}
			continue;
		}
		if (strncmp(line, "layer ", 6) != 0 || field(line, "layer ") >= layers)
			continue;
		p = strchr(line + 6, ' ');
		for (g = 0; g < 2; g++) {
			struct launch *l;
			char *r = p;

			q[g].l = grow(q[g].l, &q[g].cap, q[g].n + 1, sizeof *q[g].l);
			l = &q[g].l[q[g].n];
			l->real = 0;
			l->ids = npool;
			for (i = 0; i < nrows; i++)
				for (j = 0; j < *topk; j++) {
					long v = strtol(r + 1, &end, 10);

					r = end;
					if (rows[i] % 2 != g)
						continue;
					pool = grow(pool, &pool_cap, npool + 1, sizeof *pool);
					pool[npool++] = (int)v;
					l->real += j == 0;
				}
			/* A group without rows this step launches nothing. */
			if (!l->real)
				continue;
			l->rows = graph ? seqs / 2 + (g < seqs % 2) : l->real;
			q[g].n++;
		}
	}
	fclose(f);
	return 0;
}

static int matches(const struct queue *q, const struct rec_routing *r, unsigned topk)
{
	const struct launch *l = &q->l[q->next];
	size_t i;

	if (q->next == q->n || r->tokens != l->rows || r->k != topk)
		return 0;
	for (i = 0; i < (size_t)l->real * topk; i++)
		if ((int)rec_routing_id(r, i) != pool[l->ids + i])
			return 0;
	return 1;
}

int main(int argc, char **argv)
{
	struct queue q[2] = { { 0 }, { 0 } };
	struct wal_reader *rd;
	struct wal_error err;
	struct wal_record rec;
	struct wal_iter it;
	struct rec_routing r;
	unsigned topk, records = 0;

	if (argc != 4) {
		fprintf(stderr, "usage: check_routing TRUTH WAL eager|graph\n");
		return 2;
	}
	if (read_truth(argv[1], strcmp(argv[3], "graph") == 0, q, &topk) < 0) {
		fprintf(stderr, "check_routing: cannot read %s\n", argv[1]);
		return 2;
	}
	if (wal_reader_open_path(argv[2], &rd, &err) < 0) {
		fprintf(stderr, "check_routing: %s: %s\n", argv[2], err.msg);
		return 2;
	}
	wal_iter_init(&it, rd);
	while (wal_iter_next(&it, &rec)) {
		if (rec.type != WAL_REC_ROUTING)
			continue;
		records++;
		if (rec_routing_decode(rec.payload, rec.len, &r) < 0) {
			fprintf(stderr, "check_routing: record %u undecodable\n", records);
			return 1;
		}
		if (matches(&q[0], &r, topk))
			q[0].next++;
		else if (matches(&q[1], &r, topk))
			q[1].next++;
		else {
			fprintf(stderr, "check_routing: record %u (LSN %llu, %u rows) is neither "
				"group's next launch (%zu/%zu, %zu/%zu matched)\n", records,
				(unsigned long long)rec.lsn, r.tokens, q[0].next, q[0].n,
				q[1].next, q[1].n);
			return 1;
		}
	}
	wal_reader_close(rd);
	if (q[0].next != q[0].n || q[1].next != q[1].n) {
		fprintf(stderr, "check_routing: launches missing from the log: group 0 %zu/%zu, "
			"group 1 %zu/%zu\n", q[0].next, q[0].n, q[1].next, q[1].n);
		return 1;
	}
	printf("check_routing: %u records, all %zu launches matched\n", records, q[0].n + q[1].n);
	free(q[0].l);
	free(q[1].l);
	free(pool);
	return 0;
}

/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * libc: a libc-heavy program. malloc/realloc/free, qsort with a callback,
 * snprintf/printf, strlen/memcpy/memset/strcmp/strchr/strtol, and a small
 * chained hash table keyed by strings.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    char *key;
    long value;
    struct entry *next;
};

struct table {
    struct entry **buckets;
    size_t nbuckets;
    size_t count;
};

static uint32_t fnv1a(const char *s)
{
    uint32_t h = 2166136261u;
    while (*s) {
        h ^= (unsigned char)*s++;
        h *= 16777619u;
    }
    return h;
}

static void table_init(struct table *t, size_t nbuckets)
{
    t->buckets = calloc(nbuckets, sizeof(*t->buckets));
    t->nbuckets = nbuckets;
    t->count = 0;
}

static struct entry *table_find(struct table *t, const char *key)
{
    struct entry *e = t->buckets[fnv1a(key) % t->nbuckets];
    for (; e; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

static void table_grow(struct table *t)
{
    size_t n = t->nbuckets * 2;
    struct entry **b = calloc(n, sizeof(*b));
    for (size_t i = 0; i < t->nbuckets; i++) {
        struct entry *e = t->buckets[i];
        while (e) {
            struct entry *next = e->next;
            size_t idx = fnv1a(e->key) % n;
            e->next = b[idx];
            b[idx] = e;
            e = next;
        }
    }
    free(t->buckets);
    t->buckets = b;
    t->nbuckets = n;
}

static void table_add(struct table *t, const char *key, long delta)
{
    struct entry *e = table_find(t, key);
    if (e) {
        e->value += delta;
        return;
    }
    if (t->count + 1 > t->nbuckets)
        table_grow(t);
    e = malloc(sizeof(*e));
    size_t len = strlen(key);
    e->key = malloc(len + 1);
    memcpy(e->key, key, len + 1);
    e->value = delta;
    size_t idx = fnv1a(key) % t->nbuckets;
    e->next = t->buckets[idx];
    t->buckets[idx] = e;
    t->count++;
}

static void table_free(struct table *t)
{
    for (size_t i = 0; i < t->nbuckets; i++) {
        struct entry *e = t->buckets[i];
        while (e) {
            struct entry *next = e->next;
            free(e->key);
            free(e);
            e = next;
        }
    }
    free(t->buckets);
}

static int cmp_entry(const void *a, const void *b)
{
    const struct entry *x = *(const struct entry *const *)a;
    const struct entry *y = *(const struct entry *const *)b;
    if (x->value != y->value)
        return x->value > y->value ? -1 : 1;
    return strcmp(x->key, y->key);
}

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

static const char text[] =
    "the quick brown fox jumps over the lazy dog while the cat sleeps "
    "and the dog barks at the fox because a fox is quick and a dog is lazy "
    "so the cat wakes up and the fox runs over the hill and the dog follows "
    "the fox and the cat watches the dog and the fox from the hill";

int main(void)
{
    struct table t;
    char word[32];
    size_t textlen = strlen(text);

    table_init(&t, 4);

    /* Word frequencies, tokenised by hand with strchr. */
    const char *p = text;
    while (*p) {
        const char *sp = strchr(p, ' ');
        size_t n = sp ? (size_t)(sp - p) : strlen(p);
        if (n >= sizeof(word))
            n = sizeof(word) - 1;
        memcpy(word, p, n);
        word[n] = '\0';
        if (n)
            table_add(&t, word, 1);
        p += n;
        while (*p == ' ')
            p++;
    }

    /* Synthetic keys via snprintf, exercising growth. */
    for (int i = 0; i < 60; i++) {
        char key[24];
        snprintf(key, sizeof(key), "k%02d-%x", i % 23, (i % 23) * 7);
        table_add(&t, key, 1 + (i & 1));
    }

    /* Collect and sort entries by (count desc, key asc). */
    struct entry **all = malloc(t.count * sizeof(*all));
    size_t k = 0;
    for (size_t i = 0; i < t.nbuckets; i++)
        for (struct entry *e = t.buckets[i]; e; e = e->next)
            all[k++] = e;
    qsort(all, k, sizeof(*all), cmp_entry);

    printf("text length %zu, distinct keys %zu, buckets %zu\n", textlen,
           t.count, t.nbuckets);
    for (size_t i = 0; i < 8 && i < k; i++)
        printf("  %-10s %ld\n", all[i]->key, all[i]->value);

    /* Dynamic array growth with realloc, then qsort of numbers parsed back
     * from formatted strings. */
    size_t cap = 4, len = 0;
    long *nums = malloc(cap * sizeof(*nums));
    char buf[64];
    uint32_t x = 12345;
    for (int i = 0; i < 80; i++) {
        x = x * 1103515245u + 12345u;
        snprintf(buf, sizeof(buf), "%ld", (long)(x >> 8) - 4000000L);
        if (len == cap) {
            cap *= 2;
            nums = realloc(nums, cap * sizeof(*nums));
        }
        nums[len++] = strtol(buf, NULL, 10);
    }
    qsort(nums, len, sizeof(*nums), cmp_long);
    long sum = 0;
    for (size_t i = 0; i < len; i++)
        sum += nums[i] % 1000;
    printf("nums %zu min %ld max %ld median %ld sum%%1000 %ld\n", len, nums[0],
           nums[len - 1], nums[len / 2], sum);

    /* memset / memcmp / memmove on a heap buffer. */
    unsigned char *blk = malloc(256);
    memset(blk, 0xa5, 256);
    for (int i = 0; i < 256; i += 3)
        blk[i] = (unsigned char)i;
    memmove(blk + 10, blk, 100);
    unsigned chk = 0;
    for (int i = 0; i < 256; i++)
        chk = chk * 31 + blk[i];
    printf("blk chk %08x cmp %d\n", chk, memcmp(blk, blk + 10, 50) != 0);

    /* A formatted table row built with snprintf into one buffer. */
    char line[128];
    int off = 0;
    for (int i = 0; i < 5; i++)
        off += snprintf(line + off, sizeof(line) - off, "[%d:%s]", i,
                        all[i]->key);
    printf("%s (%d chars)\n", line, off);

    free(blk);
    free(nums);
    free(all);
    table_free(&t);
    return 0;
}

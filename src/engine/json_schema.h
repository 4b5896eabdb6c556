/* json_schema.h — a JSON Schema compiled into the graph that JSON mode's recognizer walks
 * (json_mode.h). The output is held to a subset of the schema's instances that a byte-level
 * recognizer can follow without looking ahead:
 *   - object properties come in the order the schema lists them (required ones never skipped,
 *     optional ones may be), and no others: additionalProperties matters only for an object with
 *     no properties listed (then any keys, with its schema or any values, unless false);
 *   - anyOf / oneOf / a list of types: the branches must start differently (object, array,
 *     string, number, boolean, null: the value's first byte picks the branch), except objects
 *     that list first the same required property with const / enum values of their own (a
 *     discriminated union: that value picks the branch);
 *   - enum / const: the values written compactly, byte for byte.
 * Enforced: type, properties, required, additionalProperties, items, prefixItems (and items as a
 * list with additionalItems, the older spelling of tuples), minItems, maxItems,
 * minLength, maxLength (in characters; an escape counts one), pattern (of a "type": "string"
 * schema: ECMAScript's dialect as regex.h holds it, matched anywhere in the string's text, escapes
 * decoded, unless anchored; such a string is written without \u escapes; beside lengths up to
 * 1000), minimum / maximum / exclusiveMinimum / exclusiveMaximum of an integer or a number (a DFA
 * of the values between them over its digits: pm_regex_of_int_range, pm_regex_number_range, a
 * bounded number written without an exponent; |bound| <= 10^18), multipleOf of either (a DFA of
 * the multiples' digits, pm_regex_multiples, intersected with the bounds' one; written without an
 * exponent too), enum, const,
 * anyOf, oneOf, allOf of one schema, nullable, $ref into the same document ("#/$defs/X",
 * recursion included).
 * format of a string: date, time, date-time, duration, uuid, ipv4, ipv6, hostname, email, uri (the part of each
 * validators take: json_schema.c's format_pattern, held as a pattern); other formats, like the
 * annotations (title, description, default, examples, $schema, $id, ...), are read and ignored.
 * A keyword that would constrain what cannot be enforced here (pattern beside a type
 * other than string, minimum or multipleOf beside enum or a type other than integer or number,
 * uniqueItems, contains, not, if, ...) is refused with its path, so an answer never silently
 * breaks its schema. */
#ifndef PM_JSON_SCHEMA_H
#define PM_JSON_SCHEMA_H

#include <stdint.h>

#include "util/err.h"

enum {
    PM_JN_ANY, PM_JN_OBJECT, PM_JN_ARRAY, PM_JN_STRING, PM_JN_NUMBER, PM_JN_INTEGER, PM_JN_BOOL, PM_JN_NULL,
    PM_JN_ENUM, PM_JN_UNION
};
/* What a value's first byte says it is. */
enum { PM_JC_OBJECT, PM_JC_ARRAY, PM_JC_STRING, PM_JC_NUMBER, PM_JC_BOOL, PM_JC_NULL, PM_JC_COUNT };
enum { PM_JSON_MAX_PROPS = 64, PM_JSON_MAX_ENUM = 64 };

typedef struct pm_json_node pm_json_node;
struct pm_json_node {
    int kind;                          /* PM_JN_* */
    const pm_json_node *alt[PM_JC_COUNT]; /* UNION: the branch a first byte picks (NULL: none) */
    /* OBJECT: properties in order (key: the name as JSON string content, escaped), and the values
     * of other keys when none are listed (extra; NULL: no other keys) */
    int n_props;
    const char **key;
    uint32_t *key_len;
    const pm_json_node **prop;
    uint8_t *required;
    const pm_json_node *extra;
    /* OBJECT of a discriminated union: its one listed property's value (an ENUM) picks, by the
     * literal it matched, the object the rest of the value follows (NULL: not one) */
    const pm_json_node **variant;
    /* ARRAY: item i follows prefix[i] while i < n_prefix (a tuple's), then items */
    const pm_json_node *items;
    const pm_json_node **prefix;
    int n_prefix;
    int min_items, max_items;          /* max < 0: none */
    /* STRING */
    int min_len, max_len;              /* max < 0: none */
    const struct pm_regex *pattern;    /* the text's pattern (search semantics; NULL: none); INTEGER, NUMBER: its bounds' digits (whole match) */
    /* ENUM: the values as compact JSON */
    int n_lits;
    const char **lit;
    uint32_t *lit_len;
};

/* The node of any JSON value, and of JSON mode's any object. */
const pm_json_node *pm_json_any(void);
const pm_json_node *pm_json_any_object(void);
/* The class (PM_JC_*) a value's first byte c gives, or -1. */
int pm_json_class(unsigned c);
/* The node a value of n that begins with byte c is held to: through unions, and any value made
 * concrete (an any object, array, string...); NULL when n admits no value that begins so. An enum
 * comes back as it is. */
const pm_json_node *pm_json_resolve(const pm_json_node *n, unsigned c);

typedef struct pm_json_schema pm_json_schema;
/* Compiles a schema given as JSON text; otherwise a message naming the keyword and its path, with
 * PM_EUNSUPPORTED for a construct it cannot hold an answer to and PM_EINVAL for a mistake. */
int pm_json_schema_compile(const char *text, pm_json_schema **out, pm_err *e);
const pm_json_node *pm_json_schema_root(const pm_json_schema *s);
/* The bytes its nodes and patterns' DFAs hold: what a request held to it reserves beside its KV
 * cache (its parsed document, a few times its text, left out). */
size_t pm_json_schema_bytes(const pm_json_schema *s);
void pm_json_schema_free(pm_json_schema *s);

#endif

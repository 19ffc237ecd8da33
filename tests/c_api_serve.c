/* Loads a SavedModel and answers PredictRequests the way TensorFlow Serving does, with no
 * Python anywhere: the TensorFlow C API of the pip wheel (libtensorflow_cc.so.2), the
 * tf-text op libraries loaded with TF_LoadLibrary (the set the stock model server links),
 * TF_LoadSessionFromSavedModel with tag "serve" (the session loader TF Serving uses), the
 * signatures read from the MetaGraphDef, and requests read from a TFRecord file of
 * PredictionLog protos (TF Serving's warm-up format; assets.extra/ holds one per export).
 *
 *   c_api_serve SAVED_MODEL_DIR REQUESTS_TFRECORD OP_LIBRARY...
 *
 * Prints, per request, "request N SIGNATURE" and one line per output tensor (outputs in
 * the signature's order): "output KEY DTYPE NDIMS DIM... : VALUE..." with floats as %.9g,
 * strings as hex ("-" for the empty string); or "error MESSAGE" when the run fails.
 * Exit status 0 when every request ran, 1 otherwise, 2 on a load failure.
 *
 * The protobufs are read with a small wire-format walker (field numbers from
 * tensorflow/core/protobuf/meta_graph.proto, tensorflow/core/framework/tensor.proto,
 * tensor_shape.proto and tensorflow_serving/apis/{prediction_log,predict,model}.proto).
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorflow/c/c_api.h"
#include "tensorflow/c/tf_tstring.h"

/* ------------------------------------------------------------------ wire format */

typedef struct {
  const uint8_t *p, *end;
} Reader;

typedef struct {
  uint32_t number, wire;
  uint64_t value;             /* varint / fixed value */
  const uint8_t *data;        /* length-delimited payload */
  size_t size;
} Field;

static int read_varint(Reader *r, uint64_t *out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64 && r->p < r->end; shift += 7) {
    uint8_t b = *r->p++;
    v |= (uint64_t)(b & 0x7F) << shift;
    if (!(b & 0x80)) { *out = v; return 1; }
  }
  return 0;
}

/* Next field of a message; 0 at the end (or on malformed input). */
static int next_field(Reader *r, Field *f) {
  uint64_t key;
  if (r->p >= r->end || !read_varint(r, &key)) return 0;
  f->number = (uint32_t)(key >> 3);
  f->wire = (uint32_t)(key & 7);
  f->data = NULL;
  f->size = 0;
  switch (f->wire) {
    case 0: return read_varint(r, &f->value);
    case 1: if (r->end - r->p < 8) return 0;
      memcpy(&f->value, r->p, 8); r->p += 8; return 1;
    case 5: if (r->end - r->p < 4) return 0;
      f->value = 0; memcpy(&f->value, r->p, 4); r->p += 4; return 1;
    case 2: {
      uint64_t n;
      if (!read_varint(r, &n) || (uint64_t)(r->end - r->p) < n) return 0;
      f->data = r->p; f->size = (size_t)n; r->p += n; return 1;
    }
    default: return 0;
  }
}

static Reader sub(const Field *f) { Reader r = {f->data, f->data + f->size}; return r; }

static char *copy_string(const Field *f) {
  char *s = malloc(f->size + 1);
  memcpy(s, f->data, f->size);
  s[f->size] = 0;
  return s;
}

/* ------------------------------------------------------------------ signatures */

#define MAX_TENSORS 64

typedef struct {
  char *key, *tensor;         /* "text", "serving_default_text:0" */
} Binding;

typedef struct {
  char *name;
  Binding inputs[MAX_TENSORS], outputs[MAX_TENSORS];
  int n_inputs, n_outputs;
} Signature;

static Signature signatures[32];
static int n_signatures;

/* map<string, TensorInfo> entry -> key and TensorInfo.name (field 1). */
static void read_binding(const Field *entry, Binding *b) {
  Reader r = sub(entry);
  Field f;
  b->key = b->tensor = NULL;
  while (next_field(&r, &f)) {
    if (f.number == 1 && f.wire == 2) b->key = copy_string(&f);
    if (f.number == 2 && f.wire == 2) {
      Reader info = sub(&f);
      Field g;
      while (next_field(&info, &g))
        if (g.number == 1 && g.wire == 2) b->tensor = copy_string(&g);
    }
  }
}

/* MetaGraphDef.signature_def = 5: map<string, SignatureDef>; SignatureDef.inputs = 1,
 * .outputs = 2. */
static void read_signatures(const uint8_t *data, size_t size) {
  Reader r = {data, data + size};
  Field f;
  while (next_field(&r, &f)) {
    if (f.number != 5 || f.wire != 2 || n_signatures == 32) continue;
    Signature *s = &signatures[n_signatures++];
    memset(s, 0, sizeof(*s));
    Reader entry = sub(&f);
    Field e;
    while (next_field(&entry, &e)) {
      if (e.number == 1 && e.wire == 2) s->name = copy_string(&e);
      if (e.number != 2 || e.wire != 2) continue;
      Reader def = sub(&e);
      Field d;
      while (next_field(&def, &d)) {
        if (d.number == 1 && d.wire == 2 && s->n_inputs < MAX_TENSORS)
          read_binding(&d, &s->inputs[s->n_inputs++]);
        if (d.number == 2 && d.wire == 2 && s->n_outputs < MAX_TENSORS)
          read_binding(&d, &s->outputs[s->n_outputs++]);
      }
    }
  }
}

static Signature *find_signature(const char *name) {
  for (int i = 0; i < n_signatures; i++)
    if (signatures[i].name && strcmp(signatures[i].name, name) == 0) return &signatures[i];
  return NULL;
}

static int graph_output(TF_Graph *graph, const char *tensor, TF_Output *out) {
  char op[512];
  const char *colon = strrchr(tensor, ':');
  size_t n = colon ? (size_t)(colon - tensor) : strlen(tensor);
  if (n >= sizeof(op)) return 0;
  memcpy(op, tensor, n);
  op[n] = 0;
  out->oper = TF_GraphOperationByName(graph, op);
  out->index = colon ? atoi(colon + 1) : 0;
  return out->oper != NULL;
}

/* ------------------------------------------------------------------ TensorProto */

/* TensorProto: dtype = 1, tensor_shape = 2 (dim = 2, Dim.size = 1), tensor_content = 4,
 * float_val = 5, int_val = 7, string_val = 8, int64_val = 10, bool_val = 11. */
static TF_Tensor *tensor_from_proto(const Field *proto, char *error, size_t error_size) {
  Reader r = sub(proto);
  Field f;
  int dtype = 0, ndims = 0;
  int64_t dims[16];
  const uint8_t *content = NULL;
  size_t content_size = 0;
  Field strings[4096];
  int n_strings = 0;
  int64_t ints[65536];
  int n_ints = 0;
  while (next_field(&r, &f)) {
    if (f.number == 1 && f.wire == 0) dtype = (int)f.value;
    else if (f.number == 2 && f.wire == 2) {
      Reader shape = sub(&f);
      Field d;
      while (next_field(&shape, &d)) {
        if (d.number != 2 || d.wire != 2 || ndims == 16) continue;
        Reader dim = sub(&d);
        Field size;
        dims[ndims] = 0;
        while (next_field(&dim, &size))
          if (size.number == 1 && size.wire == 0) dims[ndims] = (int64_t)size.value;
        ndims++;
      }
    } else if (f.number == 4 && f.wire == 2) {
      content = f.data; content_size = f.size;
    } else if (f.number == 8 && f.wire == 2 && n_strings < 4096) {
      strings[n_strings++] = f;
    } else if ((f.number == 7 || f.number == 10) && f.wire == 2) {     /* packed */
      Reader packed = sub(&f);
      uint64_t v;
      while (packed.p < packed.end && n_ints < 65536 && read_varint(&packed, &v))
        ints[n_ints++] = (int64_t)v;
    } else if ((f.number == 7 || f.number == 10) && f.wire == 0 && n_ints < 65536) {
      ints[n_ints++] = (int64_t)f.value;
    }
  }
  int64_t count = 1;
  for (int i = 0; i < ndims; i++) count *= dims[i];
  if (dtype == TF_STRING) {
    if (n_strings != count) {
      snprintf(error, error_size, "string tensor: %d values for %lld elements", n_strings,
               (long long)count);
      return NULL;
    }
    TF_Tensor *t = TF_AllocateTensor(TF_STRING, dims, ndims, sizeof(TF_TString) * count);
    TF_TString *data = (TF_TString *)TF_TensorData(t);
    for (int64_t i = 0; i < count; i++) {
      TF_StringInit(&data[i]);
      TF_StringCopy(&data[i], (const char *)strings[i].data, strings[i].size);
    }
    return t;
  }
  if (dtype == TF_INT32 || dtype == TF_INT64) {
    size_t width = dtype == TF_INT32 ? 4 : 8;
    TF_Tensor *t = TF_AllocateTensor((TF_DataType)dtype, dims, ndims, width * count);
    if (content) {
      if (content_size != width * count) {
        snprintf(error, error_size, "tensor_content of %zu bytes for %lld elements",
                 content_size, (long long)count);
        TF_DeleteTensor(t);
        return NULL;
      }
      memcpy(TF_TensorData(t), content, content_size);
    } else {
      for (int64_t i = 0; i < count; i++) {
        int64_t v = n_ints == 1 ? ints[0] : (i < n_ints ? ints[i] : 0);
        if (width == 4) ((int32_t *)TF_TensorData(t))[i] = (int32_t)v;
        else ((int64_t *)TF_TensorData(t))[i] = v;
      }
    }
    return t;
  }
  snprintf(error, error_size, "unsupported input dtype %d", dtype);
  return NULL;
}

/* ------------------------------------------------------------------ output */

static void print_tensor(const char *key, TF_Tensor *t) {
  int ndims = TF_NumDims(t);
  int64_t count = 1;
  printf("output %s %d %d", key, (int)TF_TensorType(t), ndims);
  for (int i = 0; i < ndims; i++) {
    printf(" %lld", (long long)TF_Dim(t, i));
    count *= TF_Dim(t, i);
  }
  printf(" :");
  void *data = TF_TensorData(t);
  for (int64_t i = 0; i < count; i++) {
    switch (TF_TensorType(t)) {
      case TF_FLOAT: printf(" %.9g", ((float *)data)[i]); break;
      case TF_DOUBLE: printf(" %.17g", ((double *)data)[i]); break;
      case TF_INT32: printf(" %d", ((int32_t *)data)[i]); break;
      case TF_INT64: printf(" %lld", (long long)((int64_t *)data)[i]); break;
      case TF_BOOL: printf(" %d", ((uint8_t *)data)[i] ? 1 : 0); break;
      case TF_STRING: {
        const TF_TString *s = &((const TF_TString *)data)[i];
        const unsigned char *bytes = (const unsigned char *)TF_StringGetDataPointer(s);
        size_t n = TF_StringGetSize(s);
        printf(" ");
        if (n == 0) printf("-");
        for (size_t j = 0; j < n; j++) printf("%02x", bytes[j]);
        break;
      }
      default: printf(" ?"); break;
    }
  }
  printf("\n");
}

/* ------------------------------------------------------------------ requests */

static uint8_t *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *data = malloc(n > 0 ? (size_t)n : 1);
  *size = fread(data, 1, (size_t)n, f);
  fclose(f);
  return data;
}

/* One PredictionLog: predict_log = 6 -> request = 1 -> model_spec = 1 (signature_name = 3),
 * inputs = 2 (map<string, TensorProto>). Returns 1 when the run succeeded. */
static int run_request(TF_Session *session, TF_Graph *graph, const uint8_t *data,
                       size_t size, int number) {
  Reader r = {data, data + size};
  Field f, request = {0};
  int found = 0;
  while (next_field(&r, &f)) {
    if (f.number != 6 || f.wire != 2) continue;
    Reader log = sub(&f);
    Field g;
    while (next_field(&log, &g))
      if (g.number == 1 && g.wire == 2) { request = g; found = 1; }
  }
  if (!found) { printf("request %d ?\nerror not a PredictLog\n", number); return 0; }
  char *signature_name = NULL;
  Field inputs[MAX_TENSORS];
  int n_inputs = 0;
  Reader req = sub(&request);
  while (next_field(&req, &f)) {
    if (f.number == 1 && f.wire == 2) {
      Reader spec = sub(&f);
      Field s;
      while (next_field(&spec, &s))
        if (s.number == 3 && s.wire == 2) signature_name = copy_string(&s);
    }
    if (f.number == 2 && f.wire == 2 && n_inputs < MAX_TENSORS) inputs[n_inputs++] = f;
  }
  if (!signature_name) signature_name = copy_string(&(Field){.data = (const uint8_t *)
      "serving_default", .size = 15});
  printf("request %d %s\n", number, signature_name);
  Signature *sig = find_signature(signature_name);
  if (!sig) { printf("error no signature %s\n", signature_name); return 0; }

  TF_Output in_ops[MAX_TENSORS], out_ops[MAX_TENSORS];
  TF_Tensor *in_values[MAX_TENSORS], *out_values[MAX_TENSORS];
  int ok = 1;
  char error[512] = "";
  for (int i = 0; i < n_inputs; i++) {
    Reader entry = sub(&inputs[i]);
    Field e, value = {0};
    char *key = NULL;
    while (next_field(&entry, &e)) {
      if (e.number == 1 && e.wire == 2) key = copy_string(&e);
      if (e.number == 2 && e.wire == 2) value = e;
    }
    Binding *b = NULL;
    for (int j = 0; key && j < sig->n_inputs; j++)
      if (strcmp(sig->inputs[j].key, key) == 0) b = &sig->inputs[j];
    in_values[i] = NULL;
    if (!b || !graph_output(graph, b->tensor, &in_ops[i])) {
      snprintf(error, sizeof(error), "input %s is not in signature %s", key ? key : "?",
               signature_name);
      ok = 0;
    } else if (!(in_values[i] = tensor_from_proto(&value, error, sizeof(error)))) {
      ok = 0;
    }
    free(key);
  }
  for (int i = 0; ok && i < sig->n_outputs; i++)
    if (!graph_output(graph, sig->outputs[i].tensor, &out_ops[i])) {
      snprintf(error, sizeof(error), "output %s not in the graph", sig->outputs[i].tensor);
      ok = 0;
    }
  if (ok) {
    TF_Status *status = TF_NewStatus();
    TF_SessionRun(session, NULL, in_ops, in_values, n_inputs, out_ops, out_values,
                  sig->n_outputs, NULL, 0, NULL, status);
    if (TF_GetCode(status) != TF_OK) {
      snprintf(error, sizeof(error), "%s", TF_Message(status));
      ok = 0;
    } else {
      for (int i = 0; i < sig->n_outputs; i++) {
        print_tensor(sig->outputs[i].key, out_values[i]);
        TF_DeleteTensor(out_values[i]);
      }
    }
    TF_DeleteStatus(status);
  }
  if (!ok) {
    for (char *c = error; *c; c++) if (*c == '\n') *c = ' ';
    printf("error %s\n", error);
  }
  for (int i = 0; i < n_inputs; i++) if (in_values[i]) TF_DeleteTensor(in_values[i]);
  free(signature_name);
  fflush(stdout);
  return ok;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s SAVED_MODEL_DIR REQUESTS_TFRECORD OP_LIBRARY...\n", argv[0]);
    return 2;
  }
  TF_Status *status = TF_NewStatus();
  for (int i = 3; i < argc; i++) {
    TF_LoadLibrary(argv[i], status);
    if (TF_GetCode(status) != TF_OK) {
      fprintf(stderr, "error: %s: %s\n", argv[i], TF_Message(status));
      return 2;
    }
  }
  TF_Graph *graph = TF_NewGraph();
  TF_SessionOptions *options = TF_NewSessionOptions();
  TF_Buffer *meta_graph = TF_NewBuffer();
  const char *tags[] = {"serve"};
  TF_Session *session = TF_LoadSessionFromSavedModel(options, NULL, argv[1], tags, 1, graph,
                                                     meta_graph, status);
  if (TF_GetCode(status) != TF_OK) {
    fprintf(stderr, "error: %s: %s\n", argv[1], TF_Message(status));
    return 2;
  }
  read_signatures(meta_graph->data, meta_graph->length);
  printf("signatures %d\n", n_signatures);

  /* TFRecord: uint64 length, uint32 masked CRC of it, the record, uint32 masked CRC. */
  size_t size;
  uint8_t *records = read_file(argv[2], &size);
  if (!records) {
    fprintf(stderr, "error: %s: cannot read\n", argv[2]);
    return 2;
  }
  int all_ok = 1, number = 0;
  size_t at = 0;
  while (at + 12 <= size) {
    uint64_t n;
    memcpy(&n, records + at, 8);
    if (n > size - at - 16) {
      fprintf(stderr, "error: %s: truncated record at byte %zu\n", argv[2], at);
      return 2;
    }
    all_ok &= run_request(session, graph, records + at + 12, (size_t)n, number++);
    at += 12 + (size_t)n + 4;
  }
  free(records);
  TF_CloseSession(session, status);
  TF_DeleteSession(session, status);
  TF_DeleteGraph(graph);
  TF_DeleteBuffer(meta_graph);
  TF_DeleteSessionOptions(options);
  TF_DeleteStatus(status);
  return all_ok ? 0 : 1;
}

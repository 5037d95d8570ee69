// Package sparkplug encodes and decodes Sparkplug B 3.0 payloads: the
// protocol buffers message Payload of the specification's
// sparkplug_b.proto (package org.eclipse.tahu.protobuf), written by hand
// for the part an edge node uses.
//
// What is covered: the payload's timestamp, seq, uuid, body and metrics;
// a metric's name, alias, timestamp, datatype, is_historical,
// is_transient, is_null, properties (a [PropertySet] of scalar values and
// nested sets) and scalar values (int, long, float, double, boolean,
// string, bytes). Data sets, templates, metadata and extensions are
// skipped when decoding (the message stays readable, those fields are
// dropped) and never written.
//
// Integers travel as the Eclipse Tahu libraries put them, which is what
// host applications read: Int8, Int16, Int32, UInt8 and UInt16 in
// int_value (a negative value as its 32-bit two's complement), UInt32,
// Int64, UInt64 and DateTime in long_value. [Metric.Int] accepts either
// field for every integer type.
//
// Topics are spBv1.0/<group>/<type>/<edge node>[/<device>]; see [Topic]
// and [ParseTopic].
package sparkplug

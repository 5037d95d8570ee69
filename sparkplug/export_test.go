package sparkplug

var SamplePayloads = samplePayloads

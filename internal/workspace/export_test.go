package workspace

// AppendManifest is appendManifest, for the encoding's fuzz target.
var AppendManifest = appendManifest

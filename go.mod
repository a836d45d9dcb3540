module github.com/canopy-hpc/canopy

go 1.26.0

require (
	github.com/go-gota/gota v0.12.0
	github.com/urfave/cli/v2 v2.27.7
	golang.org/x/image v0.48.0
	gonum.org/v1/gonum v0.9.1
	gorgonia.org/cu v0.9.6
)

require (
	github.com/cpuguy83/go-md2man/v2 v2.0.7 // indirect
	github.com/google/uuid v1.1.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
	golang.org/x/net v0.0.0-20210423184538-5f58ad60dda6 // indirect
)

// Package chart draws a bench command's figures as one PNG: a panel per
// group of rows (an engine and the way in, say "sqlite, HTTP"), and in
// each panel a bar per side (racefree, racefree with the combiner, the
// tool it is measured beside) at each client count. It needs no browser:
// gonum/plot draws straight to an image.
package chart

import (
	"fmt"
	"image/color"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Panel is one group of rows: its title, the labels along its x axis (the
// client counts) and a series per side.
type Panel struct {
	Title  string
	X      []string
	Series []Series
}

// Series is one side: a value per label of the panel's X (NaN where the
// side did not run).
type Series struct {
	Name   string
	Values []float64
}

// colours are the sides' colours, in the order of a panel's series.
var colours = []color.Color{
	color.RGBA{R: 0x4c, G: 0x72, B: 0xb0, A: 0xff},
	color.RGBA{R: 0xdd, G: 0x84, B: 0x52, A: 0xff},
	color.RGBA{R: 0x55, G: 0xa8, B: 0x68, A: 0xff},
	color.RGBA{R: 0xc4, G: 0x4e, B: 0x52, A: 0xff},
	color.RGBA{R: 0x81, G: 0x72, B: 0xb3, A: 0xff},
	color.RGBA{R: 0x93, G: 0x78, B: 0x60, A: 0xff},
}

// Write draws panels in a grid of cols columns under title, the y axis of
// each labelled ylabel, and writes the PNG to path.
func Write(path, title, ylabel string, panels []Panel, cols int) error {
	if len(panels) == 0 {
		return fmt.Errorf("chart: no panels")
	}
	rows := (len(panels) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for r := range grid {
		grid[r] = make([]*plot.Plot, cols)
	}
	for i, p := range panels {
		pl, err := draw1(p, ylabel)
		if err != nil {
			return err
		}
		grid[i/cols][i%cols] = pl
	}
	const w, h = 6 * vg.Inch, 3.6 * vg.Inch
	img := vgimg.New(w*vg.Length(cols), h*vg.Length(rows)+0.5*vg.Inch)
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	top := dc.Max.Y - 0.45*vg.Inch
	font := plot.DefaultFont
	font.Size = 14
	dc.FillText(draw.TextStyle{Color: color.Black, Font: font, XAlign: draw.XCenter, Handler: plot.DefaultTextHandler},
		vg.Point{X: dc.Center().X, Y: top + 0.15*vg.Inch}, title)
	body := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{Min: dc.Min, Max: vg.Point{X: dc.Max.X, Y: top}}}
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(grid, tiles, body)
	for r := range grid {
		for c := range grid[r] {
			if grid[r][c] != nil {
				grid[r][c].Draw(canvases[r][c])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// draw1 makes one panel's plot: grouped bars, a legend, the x labels.
func draw1(p Panel, ylabel string) (*plot.Plot, error) {
	pl := plot.New()
	pl.Title.Text = p.Title
	pl.Y.Label.Text = ylabel
	pl.Y.Min = 0
	pl.X.Label.Text = "clients"
	const bar = 20
	n := len(p.Series)
	top := 0.0
	for i, s := range p.Series {
		vals := make(plotter.Values, len(s.Values))
		for j, v := range s.Values {
			if math.IsNaN(v) {
				v = 0
			}
			vals[j] = v
			top = max(top, v)
		}
		b, err := plotter.NewBarChart(vals, bar)
		if err != nil {
			return nil, err
		}
		b.LineStyle.Width = 0
		b.Color = colours[i%len(colours)]
		b.Offset = vg.Length(float64(i)-float64(n-1)/2) * bar
		pl.Add(b)
		pl.Legend.Add(s.Name, b)
	}
	pl.Y.Max = top * 1.35 // room for the legend above the bars
	pl.Legend.Top = true
	pl.Legend.Left = true
	pl.NominalX(p.X...)
	return pl, nil
}
